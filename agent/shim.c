/* tcl-shim: the per-task supervisor, in C so that it starts in ~1 ms and costs ~100 KiB
 * per task (a Python interpreter costs ~35 ms and ~9 MiB, and the container's init would
 * be charged to the task's memory limit); with log_max, up to ~2 MiB more of buffers while
 * output flows. Built and cached by agent/runtime/shimbin.py.
 *
 *   tcl-shim SPEC      SPEC: NUL-separated key/value pairs written by the agent (0600,
 *                      so a task's environment is never visible in `ps`)
 *
 * keys: argv (repeated), env (repeated K=V), cwd, uid, gid, group (repeated), procs
 * (repeated cgroup.procs path), stdout, stderr, exit (exit record path), ns ("1": own
 * PID, mount, UTS and IPC namespaces), hostname, tmp (directory bound onto /tmp),
 * log_max (bytes per log file; absent or 0: no cap), ostdout/ostderr (the user's output
 * files, relative to cwd), oappend ("1": append to them), script (the job script's text),
 * lease (the agent's last_heard.json: the fence lease, below).
 *
 * The fence without an agent: with `lease`, a thread rereads that file every LEASE_POLL_S.
 * The agent rewrites it (at most once a second) while it hears the master, with the kernel's
 * boot id, its CLOCK_BOOTTIME reading and "fence_s", the silence after which it stops tasks
 * the master may start elsewhere. Once CLOCK_BOOTTIME passes at + fence_s + LEASE_SLACK_S
 * the shim kills the container (cgroup.kill, every pid of its cgroup.procs files, the task's
 * process group, the init) itself and
 * records "fenced" in the exit record: a dead or crash-looping agent's re-runnable task is
 * gone before the master's LOST (fence_s falls half a lost timeout before it). The slack lets
 * a live agent fence first (its kill carries the master-facing reason); a restarted agent
 * that hears the master again renews the file, so a restart within the fence keeps the task.
 * No file, another boot, or fence_s 0: nothing to enforce.
 *
 * With ns, the shim forks an init (PID 1 of the new PID namespace) that enters the cgroups,
 * makes / private, binds tmp on /tmp, mounts a fresh /proc, sets the hostname and forks
 * the task; it reaps orphans and, when the task ends, hands its wait status to the shim
 * over a pipe. When the init dies the kernel kills everything left in the namespace.
 * cwd is resolved as the task sees the filesystem (after the bind, so "/tmp" is its own)
 * and entered as the task's user, so a directory the user cannot reach fails the start.
 * The task runs with oom_score_adj 0 (the agent's unit protects the agent and its shims,
 * not the tasks) and no_new_privs (no setuid binary gives it back what it was denied).
 *
 * Logs are opened by the shim, owned by the task's user, mode 0600. Without log_max the
 * task writes straight to them. With log_max the task writes to pipes and the shim copies
 * them: a writer thread puts them on disk, rotating <file> to <file>.1 when it reaches
 * log_max (at most 2 x log_max per stream on disk), while the main thread reads into a
 * 1 MiB buffer per stream. A task that writes faster than the disk takes is slowed to its
 * pace, as without a cap, and nothing is lost; but once the writer has made no room for
 * STALL_S (a stalled disk, a slow rotation), the main thread reads on and drops the oldest
 * unwritten output, with a note in the log saying how much: a stalled disk never holds
 * the task longer than that. After the container's first process has ended the shim drains the pipes for at most 2 s more
 * (an orphan without namespaces may hold them forever), then records the exit. If the shim
 * itself is SIGKILLed, nobody reads the pipes any more: the task's next write to stdout or
 * stderr gets SIGPIPE (EPIPE if it ignores that), and no exit record is written.
 *
 * On stdout the shim prints exactly one line, `started <pid> <unix time>` (pid: the
 * container's first process) or `error <message>`, then waits and writes
 * {"exit_code", "signal", "finished_at"} atomically (tmp + fsync + rename + fsync of the
 * directory) to the exit path, whether or not an agent is still running. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* glibc's signal() refuses its reserved signals 32 and 33, but a parent can leave them
 * ignored and exec would pass that on: reset them with the kernel call itself. */
struct kernel_sigaction { void (*handler)(int); unsigned long flags; void (*restorer)(void); unsigned long mask; };

static void reset_glibc_reserved_signals(void) {
    struct kernel_sigaction dfl = {SIG_DFL, 0, NULL, 0};
    for (int sig = 32; sig <= 33; sig++) syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask);
}

#define MAX_ITEMS 4096
#define EXEC_FAILED 127
#define RING_SIZE (1 << 20)         /* per stream: output held while the disk is slow */
#define CHUNK (1 << 16)
#define DRAIN_AFTER_EXIT_S 2.0
#define STALL_S 1.0                 /* no room in a ring for this long: drop, do not block */
#define FLUSH_TIMEOUT_S 10          /* a hung disk must not cost the exit record */

extern char **environ;

struct spec {
    char *argv[MAX_ITEMS], *env[MAX_ITEMS], *procs[64];
    gid_t groups[1024];
    int argc, envc, nprocs, ngroups, has_uid, ns;
    uid_t uid;
    gid_t gid;
    unsigned long long log_max;
    char *cwd, *out, *err, *exitp, *hostname, *tmp;
    char *ostdout, *ostderr, *script;   /* the user's output files, the job script */
    int oappend;
    char *lease;                        /* the fence lease file; NULL: never fenced */
};

static struct spec S;

static void say(const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (n > (int)sizeof buf - 2) n = sizeof buf - 2;
    for (int i = 0; i < n; i++) if (buf[i] == '\n') buf[i] = ' ';
    buf[n++] = '\n';
    if (write(1, buf, n) < 0) { /* the agent stopped listening; the record still gets written */ }
}

/* In a child: tell the shim why the start failed, then exit. */
static void fail(int report, const char *step, int err) {
    dprintf(report, "%s: %s", step, strerror(err));
    _exit(EXEC_FAILED);
}

static char *read_all(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    ssize_t r;
    while (buf && (r = read(fd, buf + n, cap - n)) > 0) {
        n += r;
        if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
    }
    close(fd);
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

static int add(char **list, int *count, int max, char *value) {
    if (*count >= max - 1) return -1;
    list[(*count)++] = value;
    list[*count] = NULL;
    return 0;
}

static int parse_spec(const char *path) {
    size_t len, i = 0;
    char *buf = read_all(path, &len);
    if (!buf) return -1;
    while (i < len) {
        char *key = buf + i;
        i += strlen(key) + 1;
        if (i >= len + 1) break;
        char *val = buf + i;
        i += strlen(val) + 1;
        int bad = 0;
        if (!strcmp(key, "argv")) bad = add(S.argv, &S.argc, MAX_ITEMS, val);
        else if (!strcmp(key, "env")) bad = add(S.env, &S.envc, MAX_ITEMS, val);
        else if (!strcmp(key, "procs")) bad = add(S.procs, &S.nprocs, 64, val);
        else if (!strcmp(key, "group") && S.ngroups < 1024) S.groups[S.ngroups++] = (gid_t)strtoul(val, NULL, 10);
        else if (!strcmp(key, "uid")) { S.uid = (uid_t)strtoul(val, NULL, 10); S.has_uid = 1; }
        else if (!strcmp(key, "gid")) S.gid = (gid_t)strtoul(val, NULL, 10);
        else if (!strcmp(key, "cwd")) S.cwd = val;
        else if (!strcmp(key, "stdout")) S.out = val;
        else if (!strcmp(key, "stderr")) S.err = val;
        else if (!strcmp(key, "exit")) S.exitp = val;
        else if (!strcmp(key, "ns")) S.ns = !strcmp(val, "1");
        else if (!strcmp(key, "hostname")) S.hostname = val;
        else if (!strcmp(key, "tmp")) S.tmp = val;
        else if (!strcmp(key, "log_max")) S.log_max = strtoull(val, NULL, 10);
        else if (!strcmp(key, "ostdout")) S.ostdout = val;
        else if (!strcmp(key, "ostderr")) S.ostderr = val;
        else if (!strcmp(key, "oappend")) S.oappend = !strcmp(val, "1");
        else if (!strcmp(key, "script")) S.script = val;
        else if (!strcmp(key, "lease")) S.lease = val;
        if (bad) { errno = E2BIG; return -1; }
    }
    if (S.argc == 0 || !S.out || !S.err || !S.exitp || !S.cwd) { errno = EINVAL; return -1; }
    return 0;
}

static void enter_cgroups(int report) {
    for (int i = 0; i < S.nprocs; i++) {
        int fd = open(S.procs[i], O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "0", 1) != 1) {
            char step[600];
            snprintf(step, sizeof step, "cannot enter cgroup %s", S.procs[i]);
            fail(report, step, errno);
        }
        close(fd);
    }
}

/* ---- the task's output: one stream per log file (one if stdout and stderr are the same) */

struct stream {
    const char *path;
    int fd;                         /* the current log file; -1 after a failed rotation */
    int in;                         /* with log_max: the pipe's read end, -1 at EOF */
    unsigned long long size;        /* of the current log file */
    char *ring;                     /* unwritten output, oldest at head (under `lock`) */
    size_t head, len;
    unsigned long long dropped;     /* overwritten before it reached the disk (under `lock`) */
    unsigned long long unsaved;     /* refused by the disk (writer thread only) */
    double full_since;              /* since when the ring has had no room (main thread) */
};

static struct stream streams[2];
static int nstreams, closing, reader_waiting;
static int room_pipe[2] = {-1, -1};      /* the writer tells a waiting reader there is room */
/* The container's first process while it is unreaped (0 before and after): its pid and
 * process group cannot be reused until it is reaped, and `reaping` makes the reap and a
 * kill exclusive, so a fence never signals a recycled pid (another task's group). */
static pid_t lease_child;
static pthread_mutex_t reaping = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;

struct task_fds { int out, err; };

/* Readable by root and the task's user only, whoever created the file. O_NOFOLLOW: the
 * file is handed to the task's user, so never through a link. */
static int open_log(const char *path, int flags) {
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | flags, 0600);
    if (fd < 0) return -1;
    if ((S.has_uid && fchown(fd, S.uid, S.gid) < 0) || fchmod(fd, 0600) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* Opened by the shim, in the host's view, before anything else: the task gets the files
 * themselves (no cap) or pipes that the shim copies to them (log_max). */
static int open_outputs(struct task_fds *f) {
    nstreams = strcmp(S.out, S.err) ? 2 : 1;
    streams[0].path = S.out;
    streams[1].path = S.err;
    int wr[2];
    for (int i = 0; i < nstreams; i++) {
        struct stream *s = &streams[i];
        struct stat st;
        s->in = wr[i] = -1;
        if ((s->fd = open_log(s->path, O_APPEND)) < 0) return -1;
        s->size = fstat(s->fd, &st) == 0 ? (unsigned long long)st.st_size : 0;
        if (!S.log_max) { wr[i] = s->fd; continue; }
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0 || !(s->ring = malloc(RING_SIZE))) return -1;
        s->in = p[0];
        wr[i] = p[1];
    }
    if (S.log_max && pipe2(room_pipe, O_CLOEXEC | O_NONBLOCK) < 0) return -1;
    f->out = wr[0];
    f->err = wr[nstreams - 1];
    return 0;
}

/* In a child: the files and read ends are the shim's. An init that kept a log file open
 * would keep a rotated-away file on disk for the task's lifetime. */
static void close_shim_ends(void) {
    if (!S.log_max) return;
    for (int i = 0; i < nstreams; i++) { close(streams[i].fd); close(streams[i].in); }
    close(room_pipe[0]); close(room_pipe[1]);
}

/* <file> becomes <file>.1 (replacing the older one) and a fresh <file> starts. Only a
 * rename and an open: nothing here waits for data to reach the disk. */
static void rotate(struct stream *s) {
    char old[4200];
    snprintf(old, sizeof old, "%s.1", s->path);
    if (s->fd >= 0) close(s->fd);
    if (rename(s->path, old) < 0) { /* O_TRUNC below keeps the cap all the same */ }
    s->fd = open_log(s->path, O_APPEND | O_TRUNC);
    s->size = 0;
}

/* Returns how many bytes did not reach the disk (full, failing: the next write retries). */
static size_t log_write(struct stream *s, const char *p, size_t n) {
    while (n > 0) {
        if (s->fd < 0 || s->size >= S.log_max) rotate(s);
        if (s->fd < 0) return n;
        size_t room = S.log_max - s->size, k = n < room ? n : room;
        ssize_t w = write(s->fd, p, k);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return n;
        s->size += w;
        p += w;
        n -= w;
    }
    return 0;
}

static void note_gap(struct stream *s, unsigned long long lost) {
    char note[160];
    int n = snprintf(note, sizeof note, "\n[tcl-shim: %llu bytes of output lost: the log disk was too slow or "
                     "failing]\n", lost);
    log_write(s, note, n);
}

/* The writer thread: ring buffers to files, round robin over the streams, until closing. */
static void *write_logs(void *unused) {
    static char chunk[CHUNK];
    int next = 0;
    pthread_mutex_lock(&lock);
    for (;;) {
        struct stream *s = NULL;
        for (int k = 0; k < nstreams && !s; k++)
            if (streams[(next + k) % nstreams].len) s = &streams[(next + k) % nstreams];
        if (!s) {
            if (closing) break;
            pthread_cond_wait(&wake, &lock);
            continue;
        }
        next = (int)(s - streams + 1) % nstreams;
        size_t n = s->len < CHUNK ? s->len : CHUNK;
        if (n > RING_SIZE - s->head) n = RING_SIZE - s->head;
        memcpy(chunk, s->ring + s->head, n);   /* copied out: the reader may overwrite the ring */
        s->head = (s->head + n) % RING_SIZE;
        s->len -= n;
        unsigned long long lost = s->dropped + s->unsaved;
        s->dropped = s->unsaved = 0;
        if (reader_waiting) {
            reader_waiting = 0;
            if (write(room_pipe[1], "", 1) < 0) { /* full: a wake-up is pending already */ }
        }
        pthread_mutex_unlock(&lock);
        if (lost) note_gap(s, lost);        /* where the lost bytes were: just before chunk */
        s->unsaved += log_write(s, chunk, n);
        pthread_mutex_lock(&lock);
    }
    pthread_mutex_unlock(&lock);
    return unused;
}

/* Under `lock`. Beyond the ring's room (only once the disk stalled) the oldest bytes go:
 * the newest output is what explains how a task ended. */
static void ring_put(struct stream *s, const char *p, size_t n) {
    size_t over = s->len + n > RING_SIZE ? s->len + n - RING_SIZE : 0;
    s->head = (s->head + over) % RING_SIZE;
    s->len -= over;
    s->dropped += over;
    size_t tail = (s->head + s->len) % RING_SIZE, first = n < RING_SIZE - tail ? n : RING_SIZE - tail;
    memcpy(s->ring + tail, p, first);
    memcpy(s->ring, p + first, n - first);
    s->len += n;
}

static void take_in(struct stream *s, size_t want) {
    char buf[CHUNK];
    ssize_t n = read(s->in, buf, want);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) { close(s->in); s->in = -1; return; }
    pthread_mutex_lock(&lock);
    ring_put(s, buf, (size_t)n);
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
}

/* ---- the container ---------------------------------------------------------------- */

static void setup_namespaces(int report) {
    /* Here, not in the shim: the shim must keep the host's view to write the exit record. */
    if (unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC) < 0) fail(report, "cannot create the task's namespaces", errno);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        fail(report, "cannot make the mount namespace private", errno);
    if (S.tmp) {
        if (mount(S.tmp, "/tmp", NULL, MS_BIND, NULL) < 0) fail(report, "cannot mount the private /tmp", errno);
        mount(NULL, "/tmp", NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL);
    }
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NOEXEC | MS_NODEV, NULL) < 0)
        fail(report, "cannot mount /proc for the PID namespace", errno);
    if (S.hostname && sethostname(S.hostname, strnlen(S.hostname, 64)) < 0)
        fail(report, "cannot set the hostname", errno);
}

/* The agent's unit sets OOMScoreAdjust=-900 for itself and its shims; the task must be
 * an ordinary candidate for the OOM killer. Raising the value needs no privilege. */
static void reset_oom_score(int report) {
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) fail(report, "cannot reset oom_score_adj", errno);
    close(fd);
}

static void open_user_outputs(int report);
static void hand_script(int report);

static void exec_task(struct task_fds f, int report) {
    setsid();   /* the task leads its own session and process group */
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null < 0 || dup2(null, 0) < 0 || dup2(f.out, 1) < 0 || dup2(f.err, 2) < 0)
        fail(report, "cannot redirect stdio", errno);
    reset_oom_score(report);
    if (S.has_uid) {
        char step[100];
        snprintf(step, sizeof step, "cannot switch to uid %u gid %u", S.uid, S.gid);
        /* supplementary groups and gid need root, so setuid comes last */
        if (setgroups(S.ngroups, S.groups) < 0 || setgid(S.gid) < 0 || setuid(S.uid) < 0) fail(report, step, errno);
    }
    /* As the task's user, by path: a directory it could not reach would start it in a
     * place where getcwd and `cd .` fail. */
    if (chdir(S.cwd) < 0) {
        char step[600];
        snprintf(step, sizeof step, "cannot chdir to %s", S.cwd);
        fail(report, step, errno);
    }
    open_user_outputs(report);
    hand_script(report);
    /* exec keeps ignored signals ignored and the mask: start with a shell's defaults */
    for (int sig = 1; sig < NSIG; sig++) signal(sig, SIG_DFL);
    reset_glibc_reserved_signals();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) fail(report, "cannot set no_new_privs", errno);
    environ = S.env;    /* execvp searches the task's PATH, not ours */
    execvp(S.argv[0], S.argv);
    dprintf(report, "exec failed: %s: '%s'", strerror(errno), S.argv[0]);
    _exit(EXEC_FAILED);
}

/* As the task's user, in its working directory and mount namespace: the files named by
 * --stdout-file/--stderr-file replace the agent's logs on fd 1/2 (one file for both when
 * they name the same path). The task writes to them itself, so nothing is copied and an
 * agent restart can neither lose nor repeat a byte. A file that cannot be opened fails
 * the start, naming it. */
static void open_user_output(const char *path, int target, int report) {
    /* O_NONBLOCK: a FIFO without a reader fails the start at once (ENXIO) instead of
     * holding it until the agent's start timeout; cleared for the task's writes. */
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (S.oappend ? O_APPEND : O_TRUNC), 0644);
    if (fd >= 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) { close(fd); fd = -1; }
    if (fd < 0 || dup2(fd, target) < 0) {
        char step[4400];
        snprintf(step, sizeof step, "cannot open the output file %s (in %s)", path, S.cwd);
        fail(report, step, errno);
    }
    close(fd);
}

static void open_user_outputs(int report) {
    if (S.ostdout) open_user_output(S.ostdout, 1, report);
    if (S.ostderr && S.ostdout && !strcmp(S.ostderr, S.ostdout)) {
        if (dup2(1, 2) < 0) fail(report, "cannot redirect stderr", errno);
    } else if (S.ostderr) {
        open_user_output(S.ostderr, 2, report);
    }
}

/* The job script on SCRIPT_FD (tcluster/domain/scripts.py): an anonymous file the
 * interpreter opens as /proc/self/fd/63, so the node needs no copy anyone could reach. */
#define SCRIPT_FD 63
#ifndef SYS_memfd_create
#define SYS_memfd_create 319
#endif
static void hand_script(int report) {
    if (!S.script) return;
    int fd = (int)syscall(SYS_memfd_create, "tcl-script", 0);
    if (fd < 0) fail(report, "cannot hold the job script", errno);
    size_t n = strlen(S.script), done = 0;
    while (done < n) {
        ssize_t w = write(fd, S.script + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) fail(report, "cannot hold the job script", errno);
        done += (size_t)w;
    }
    if (lseek(fd, 0, SEEK_SET) < 0 || (fd != SCRIPT_FD && dup2(fd, SCRIPT_FD) < 0))
        fail(report, "cannot hand over the job script", errno);
    if (fd != SCRIPT_FD) close(fd);
}

/* PID 1 of the container: reap everything, report the task's status, exit. It keeps the
 * agent's oom_score_adj: if the OOM killer must choose, the task's death is reported
 * exactly, while the init's would lose its status. */
static void container_init(struct task_fds f, int report, int status_fd) {
    enter_cgroups(report);
    setup_namespaces(report);
    pid_t task = fork();
    if (task < 0) fail(report, "cannot fork the task", errno);
    if (task == 0) exec_task(f, report);
    close(report);
    close(f.out);
    if (f.err != f.out) close(f.err);
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, 0);
        if (pid == task) {
            if (write(status_fd, &st, sizeof st) < 0) { /* the shim is gone: nobody to tell */ }
            _exit(0);
        }
        if (pid < 0 && errno == ECHILD) _exit(EXEC_FAILED);
    }
}

/* ---- the shim ---------------------------------------------------------------------- */

static double clock_s(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fsync_dir_of(const char *path) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    fsync(fd);          /* the rename itself survives a crash only once its directory is synced */
    close(fd);
}

/* Publishes `body` as the exit file, whole or not at all: written beside it, synced, renamed
 * over it, and the rename synced (the agent, or a restarted one, reads it after a crash). */
static void publish_exit_file(const char *body) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", S.exitp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return;
    if (write(fd, body, strlen(body)) < 0) { /* rename below still publishes what is there */ }
    fsync(fd);
    close(fd);
    if (rename(tmp, S.exitp) == 0) fsync_dir_of(S.exitp);
}

static void write_exit(int status, double finished_at, int was_fenced, double silence) {
    char body[300], fence[100] = "";
    if (was_fenced) snprintf(fence, sizeof fence, ", \"fenced\": true, \"silence_s\": %.1f", silence);
    if (WIFSIGNALED(status))
        snprintf(body, sizeof body, "{\"exit_code\": null, \"signal\": %d, \"finished_at\": %.6f%s}\n",
                 WTERMSIG(status), finished_at, fence);
    else
        snprintf(body, sizeof body, "{\"exit_code\": %d, \"signal\": 0, \"finished_at\": %.6f%s}\n",
                 WEXITSTATUS(status), finished_at, fence);
    publish_exit_file(body);
}

/* Reaps `pid` once it has ended (blocking, or not with WNOHANG: then 0 if it runs on).
 * It waits without reaping first, then stops the fence from signalling it, then reaps. */
static int reap(pid_t pid, int *st, int options) {
    siginfo_t info;
    info.si_pid = 0;
    while (waitid(P_PID, pid, &info, WEXITED | WNOWAIT | options) < 0 && errno == EINTR) {}
    if (info.si_pid != pid) return 0;
    pthread_mutex_lock(&reaping);
    lease_child = 0;
    pthread_mutex_unlock(&reaping);
    while (waitpid(pid, st, 0) < 0 && errno == EINTR) {}
    return 1;
}

static int wait_for(pid_t pid) {
    int st = 0;
    reap(pid, &st, 0);
    return st;
}

/* ---- the fence lease (see the top) ------------------------------------------------- */

#define LEASE_POLL_S 0.25
#define LEASE_SLACK_S 1.0
static volatile int fenced;             /* the lease expired and the container was killed */
static double fenced_silence;

/* The number after `"key": ` in a small JSON object, or `fallback`. */
static double json_number(const char *text, const char *key, double fallback) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(text, pat);
    if (!at) return fallback;
    char *end;
    double v = strtod(at + strlen(pat), &end);
    return end == at + strlen(pat) ? fallback : v;
}

/* Seconds past the lease's end (> 0: expired), or <= 0 while it holds or means nothing. */
static double lease_overdue(double *silence) {
    size_t len;
    char *text = read_all(S.lease, &len), *boot_text = read_all("/proc/sys/kernel/random/boot_id", &len);
    double over = 0;
    if (text && boot_text) {
        char boot[64] = "";
        snprintf(boot, sizeof boot, "%.36s", boot_text);
        double at = json_number(text, "at", -1), fence_s = json_number(text, "fence_s", 0);
        double now = clock_s(CLOCK_BOOTTIME);
        if (fence_s > 0 && at >= 0 && at <= now && boot[0] && strstr(text, boot)) {
            *silence = now - at;
            over = *silence - fence_s - LEASE_SLACK_S;
        }
    }
    free(text);
    free(boot_text);
    return over;
}

/* SIGKILL to every process listed in a cgroup.procs file (cgroup v1 has no cgroup.kill): a
 * task child that called setsid() left the task's process group, never its cgroup. Read and
 * closed each time: the shim keeps no file of the group open. */
static void kill_listed(const char *procs) {
    size_t len;
    char *text = read_all(procs, &len);
    if (!text) return;
    pid_t me = getpid();
    for (char *p = text, *end; *p; p = end) {
        long pid = strtol(p, &end, 10);
        if (end == p) { end = p + 1; continue; }
        if (pid > 0 && pid != me) kill((pid_t)pid, SIGKILL);
    }
    free(text);
}

static void kill_container(void) {
    for (int i = 0; i < S.nprocs; i++) {    /* cgroup v2: every process of the group at once */
        char path[4200];
        snprintf(path, sizeof path, "%s", S.procs[i]);
        char *slash = strrchr(path, '/');
        if (!slash) continue;
        snprintf(slash, sizeof path - (slash - path), "/cgroup.kill");
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd >= 0) { if (write(fd, "1", 1) < 0) { /* no cgroup.kill: the signals below */ } close(fd); }
        kill_listed(S.procs[i]);            /* v1 (and a v2 kernel before 5.14): each process */
    }
    pthread_mutex_lock(&reaping);
    if (lease_child > 0) { kill(-lease_child, SIGKILL); kill(lease_child, SIGKILL); }
    pthread_mutex_unlock(&reaping);
}

static void *watch_lease(void *unused) {
    (void)unused;
    struct timespec tick = {0, (long)(LEASE_POLL_S * 1e9)};
    for (;;) {
        nanosleep(&tick, NULL);
        double silence = 0;
        pthread_mutex_lock(&reaping);
        pid_t child = lease_child;
        pthread_mutex_unlock(&reaping);
        if (child <= 0 || lease_overdue(&silence) <= 0) continue;
        fenced_silence = silence;
        fenced = 1;
        kill_container();
        tick.tv_sec = 1; tick.tv_nsec = 0;     /* again each second: a fork that raced the kill */
    }
    return NULL;
}

/* Fills the poll set with the pipes to read now and how much of each. A stream whose ring
 * is full waits for the writer (the pipe fills and the task waits too) until STALL_S: then
 * it is read anyway and its oldest output dropped. *recheck: when that will be. */
static int pipes_to_read(struct pollfd *p, struct stream **of, size_t *want, double now, double *recheck) {
    int np = 0;
    pthread_mutex_lock(&lock);      /* with the writer's check of reader_waiting: no lost wake-up */
    for (int i = 0; i < nstreams; i++) {
        struct stream *s = &streams[i];
        if (s->in < 0) continue;
        size_t room = RING_SIZE - s->len;
        if (room) s->full_since = 0;
        else if (!s->full_since) s->full_since = now;
        if (!room && now < s->full_since + STALL_S) {
            reader_waiting = 1;
            if (s->full_since + STALL_S < *recheck) *recheck = s->full_since + STALL_S;
            continue;
        }
        want[np] = room && room < CHUNK ? room : CHUNK;
        of[np] = s;
        p[np++] = (struct pollfd){s->in, POLLIN, 0};
    }
    pthread_mutex_unlock(&lock);
    return np;
}

static int open_pipes(void) {
    int n = 0;
    for (int i = 0; i < nstreams; i++) n += streams[i].in >= 0;
    return n;
}

/* With log_max: read the pipes until EOF on all of them, or until DRAIN_AFTER_EXIT_S after
 * `pid` (the container's first process) ended. Returns its wait status; *ended: when. */
static int supervise_logs(pid_t pid, double *ended) {
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);     /* before Linux 5.3: poll every 100 ms */
    int st = 0, exited = 0;
    double deadline = 0;
    for (;;) {
        struct pollfd p[4];
        struct stream *of[2];
        size_t want[2];
        double now = clock_s(CLOCK_MONOTONIC), until = now + (pidfd >= 0 ? 3600 : 0.1);
        if (exited && (!open_pipes() || now >= deadline)) break;
        if (exited && deadline < until) until = deadline;
        int pipes = pipes_to_read(p, of, want, now, &until), np = pipes;
        p[np++] = (struct pollfd){room_pipe[0], POLLIN, 0};
        if (!exited && pidfd >= 0) p[np++] = (struct pollfd){pidfd, POLLIN, 0};
        if (poll(p, np, (int)((until - now) * 1000) + 1) < 0 && errno != EINTR) usleep(10000);   /* ENOMEM */
        for (int i = 0; i < pipes; i++) if (p[i].revents) take_in(of[i], want[i]);
        char drain[64];
        if (p[pipes].revents) while (read(room_pipe[0], drain, sizeof drain) > 0) {}
        if (!exited && reap(pid, &st, WNOHANG)) {
            exited = 1;
            *ended = clock_s(CLOCK_REALTIME);
            deadline = clock_s(CLOCK_MONOTONIC) + DRAIN_AFTER_EXIT_S;
        }
    }
    for (int i = 0; i < nstreams; i++) if (streams[i].in >= 0) close(streams[i].in);
    if (pidfd >= 0) close(pidfd);
    return st;
}

/* Lets the writer thread put what is buffered on disk, bounded in time. */
static void flush_logs(pthread_t writer) {
    pthread_mutex_lock(&lock);
    closing = 1;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += FLUSH_TIMEOUT_S;
    pthread_timedjoin_np(writer, NULL, &until);
}

/* ---- watch mode: the fence for a docker task (agent/runtime/dockerfence.py) -----------
 *
 *   tcl-shim --watch LEASE PID RECORD LOCK PROCS...
 *
 * A docker task has no shim, so without an agent nothing would fence it. The agent starts
 * this detached watcher beside each docker task of a job with retries. It holds flock(LOCK)
 * for its life, so a re-adopting agent's second watcher sees one runs and leaves; prints
 * `watching <pid>` (or `watching already`, `ended`), forks into its own session (it outlives
 * the agent, as shims do under KillMode=process) and polls the container's init (PID, by
 * pidfd) and the lease every LEASE_POLL_S. Once the lease is fence_s + LEASE_SLACK_S old it
 * kills every process listed in the container's cgroup.procs files (and cgroup.kill on v2),
 * again each second, and records {"fenced": true, "silence_s"} in RECORD for the agent to
 * report the attempt KILLED. It exits when the init ends or the group is gone; it never joins
 * the container's cgroup nor keeps a file of it open, so the engine removes it as usual. */
static void write_fence_record(double silence) {
    char body[200];
    snprintf(body, sizeof body, "{\"fenced\": true, \"silence_s\": %.1f, \"at\": %.6f}\n", silence,
             clock_s(CLOCK_REALTIME));
    publish_exit_file(body);
}

static int group_exists(void) {
    for (int i = 0; i < S.nprocs; i++) if (access(S.procs[i], F_OK) == 0) return 1;
    return 0;
}

static void watch_loop(int pidfd) {
    double silence = 0;
    int fenced_once = 0, wait_ms = (int)(LEASE_POLL_S * 1000);
    for (;;) {
        struct pollfd p = {pidfd, POLLIN, 0};
        if (poll(&p, 1, wait_ms) > 0 || !group_exists()) return;    /* the container ended */
        if (lease_overdue(&silence) <= 0) continue;
        kill_container();
        if (!fenced_once) write_fence_record(silence);
        fenced_once = 1;
        wait_ms = 1000;                     /* again each second: a fork that raced the kill */
    }
}

static int watch_container(int argc, char **argv) {
    if (argc < 7) { say("error usage: tcl-shim --watch LEASE PID RECORD LOCK PROCS..."); return 2; }
    S.lease = argv[2];
    S.exitp = argv[4];
    for (int i = 6; i < argc && S.nprocs < 64; i++) S.procs[S.nprocs++] = argv[i];
    signal(SIGHUP, SIG_IGN); signal(SIGINT, SIG_IGN); signal(SIGTERM, SIG_IGN); signal(SIGPIPE, SIG_IGN);
    if (chdir("/") < 0) { /* stay where we are: nothing depends on it */ }
    int lock = open(argv[5], O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock < 0) { say("error cannot open %s: %s", argv[5], strerror(errno)); return 1; }
    if (flock(lock, LOCK_EX | LOCK_NB) < 0) { say("watching already"); return 0; }
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)atoi(argv[3]), 0);
    if (pidfd < 0) { say("ended"); return 0; }
    pid_t child = fork();
    if (child < 0) { say("error cannot fork: %s", strerror(errno)); return 1; }
    if (child > 0) { say("watching %d", child); return 0; }     /* the lock stays with the child */
    setsid();
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) { dup2(null, 0); dup2(null, 1); dup2(null, 2); }   /* the agent reads to EOF */
    watch_loop(pidfd);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--watch")) return watch_container(argc, argv);
    if (argc != 2) { say("error usage: tcl-shim SPEC"); return 2; }
    if (parse_spec(argv[1]) < 0) { say("error cannot read the task spec %s: %s", argv[1], strerror(errno)); return 1; }
    /* Stray terminal or service-manager signals must not cost the task its exit record. */
    signal(SIGHUP, SIG_IGN); signal(SIGINT, SIG_IGN); signal(SIGTERM, SIG_IGN); signal(SIGPIPE, SIG_IGN);
    if (chdir("/") < 0) { /* stay where we are: nothing depends on it */ }
    struct task_fds f;
    if (open_outputs(&f) < 0) { say("error cannot open the log files: %s", strerror(errno)); return 1; }
    /* Before unshare(CLONE_NEWPID): after it, the kernel refuses to create threads. */
    pthread_t writer;
    int e = S.log_max ? pthread_create(&writer, NULL, write_logs, NULL) : 0;
    if (e) { say("error cannot start the log writer: %s", strerror(e)); return 1; }
    pthread_t lease_watcher;
    e = S.lease ? pthread_create(&lease_watcher, NULL, watch_lease, NULL) : 0;
    if (e) { say("error cannot start the fence lease watcher: %s", strerror(e)); return 1; }
    int report[2], status[2];
    if (pipe2(report, O_CLOEXEC) < 0 || pipe2(status, O_CLOEXEC) < 0) { say("error pipe: %s", strerror(errno)); return 1; }
    /* CLONE_NEWPID applies to the children: the init forked next is PID 1 there. */
    if (S.ns && unshare(CLONE_NEWPID) < 0) {
        say("error cannot create the task's PID namespace: %s", strerror(errno));
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) { say("error cannot fork: %s", strerror(errno)); return 1; }
    if (pid == 0) {
        close(report[0]); close(status[0]);
        close_shim_ends();
        if (S.ns) container_init(f, report[1], status[1]);
        enter_cgroups(report[1]);
        exec_task(f, report[1]);
    }
    close(report[1]); close(status[1]);
    close(f.out);
    if (f.err != f.out) close(f.err);
    char msg[2048];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof msg - 1 && (r = read(report[0], msg + n, sizeof msg - 1 - n)) != 0) {
        if (r < 0) { if (errno == EINTR) continue; break; }
        n += r;
    }
    msg[n] = 0;
    if (n > 0) {
        say("error %s", msg);
        wait_for(pid);
        return 1;
    }
    pthread_mutex_lock(&reaping);
    lease_child = pid;
    pthread_mutex_unlock(&reaping);
    say("started %d %.6f", pid, clock_s(CLOCK_REALTIME));
    int null = open("/dev/null", O_WRONLY);   /* the agent sees EOF; no later EPIPE */
    dup2(null, 1);
    double ended = 0;
    int st = S.log_max ? supervise_logs(pid, &ended) : wait_for(pid);
    if (S.ns) {
        int task_st;
        /* no status from the init: it was killed (cgroup.kill, OOM), and that is the exit */
        if (read(status[0], &task_st, sizeof task_st) == sizeof task_st) st = task_st;
    }
    if (S.log_max) flush_logs(writer);
    write_exit(st, ended ? ended : clock_s(CLOCK_REALTIME), fenced, fenced_silence);
    return 0;
}
