/* tcl-shim: the per-task supervisor, in C so that it starts in ~1 ms and costs ~100 KiB
 * per task (a Python interpreter costs ~35 ms and ~9 MiB, and the container's init would
 * be charged to the task's memory limit). agent/shim.py is its Python twin, used only
 * where no C compiler was available; both speak the same protocol:
 *
 *   tcl-shim SPEC      SPEC: NUL-separated key/value pairs written by the agent (0600,
 *                      so a task's environment is never visible in `ps`)
 *
 * keys: argv (repeated), env (repeated K=V), cwd, uid, gid, group (repeated), procs
 * (repeated cgroup.procs path), stdout, stderr, exit (exit record path), ns ("1": own
 * PID, mount, UTS and IPC namespaces), hostname, tmp (directory bound onto /tmp).
 *
 * With ns, the shim forks an init (PID 1 of the new PID namespace) that enters the cgroups,
 * makes / private, binds tmp on /tmp, mounts a fresh /proc, sets the hostname and forks
 * the task; it reaps orphans and, when the task ends, hands its wait status to the shim
 * over a pipe. When the init dies the kernel kills everything left in the namespace.
 *
 * On stdout the shim prints exactly one line, `started <pid> <unix time>` (pid: the
 * container's first process) or `error <message>`, then waits and writes
 * {"exit_code", "signal", "finished_at"} atomically (tmp + fsync + rename) to the exit
 * path, whether or not an agent is still running. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* glibc's signal() refuses its reserved signals 32 and 33, but a parent can leave them
 * ignored and exec would pass that on: reset them with the kernel call itself. */
struct kernel_sigaction { void (*handler)(int); unsigned long flags; void (*restorer)(void); unsigned long mask; };

static void reset_glibc_reserved_signals(void) {
    struct kernel_sigaction dfl = {SIG_DFL, 0, NULL, 0};
    for (int sig = 32; sig <= 33; sig++) syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask);
}

#define MAX_ITEMS 4096
#define EXEC_FAILED 127

extern char **environ;

struct spec {
    char *argv[MAX_ITEMS], *env[MAX_ITEMS], *procs[64];
    gid_t groups[1024];
    int argc, envc, nprocs, ngroups, has_uid, ns;
    uid_t uid;
    gid_t gid;
    char *cwd, *out, *err, *exitp, *hostname, *tmp;
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

struct task_fds { int out, err, cwd; };

/* Opened before /tmp is replaced: the logs and the working directory may live there. */
static struct task_fds open_task_fds(int report) {
    struct task_fds f;
    int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC;
    f.out = open(S.out, flags, 0644);
    f.err = f.out >= 0 && !strcmp(S.out, S.err) ? f.out : open(S.err, flags, 0644);
    if (f.out < 0 || f.err < 0) fail(report, "cannot open the log files", errno);
    f.cwd = open(S.cwd, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (f.cwd < 0) {
        char step[600];
        snprintf(step, sizeof step, "cannot chdir to %s", S.cwd);
        fail(report, step, errno);
    }
    return f;
}

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

static void exec_task(struct task_fds f, int report) {
    setsid();   /* the task leads its own session and process group */
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null < 0 || dup2(null, 0) < 0 || dup2(f.out, 1) < 0 || dup2(f.err, 2) < 0)
        fail(report, "cannot redirect stdio", errno);
    if (S.has_uid) {
        char step[100];
        snprintf(step, sizeof step, "cannot switch to uid %u gid %u", S.uid, S.gid);
        /* supplementary groups and gid need root, so setuid comes last */
        if (setgroups(S.ngroups, S.groups) < 0 || setgid(S.gid) < 0 || setuid(S.uid) < 0) fail(report, step, errno);
    }
    if (fchdir(f.cwd) < 0) {
        char step[600];
        snprintf(step, sizeof step, "cannot chdir to %s", S.cwd);
        fail(report, step, errno);
    }
    /* exec keeps ignored signals ignored and the mask: start with a shell's defaults */
    for (int sig = 1; sig < NSIG; sig++) signal(sig, SIG_DFL);
    reset_glibc_reserved_signals();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    environ = S.env;    /* execvp searches the task's PATH, not ours */
    execvp(S.argv[0], S.argv);
    dprintf(report, "exec failed: %s: '%s'", strerror(errno), S.argv[0]);
    _exit(EXEC_FAILED);
}

/* PID 1 of the container: reap everything, report the task's status, exit. */
static void container_init(int report, int status_fd) {
    enter_cgroups(report);
    struct task_fds f = open_task_fds(report);
    setup_namespaces(report);
    pid_t task = fork();
    if (task < 0) fail(report, "cannot fork the task", errno);
    if (task == 0) exec_task(f, report);
    close(report);
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

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void write_exit(int status) {
    char tmp[4200], body[200];
    if (WIFSIGNALED(status))
        snprintf(body, sizeof body, "{\"exit_code\": null, \"signal\": %d, \"finished_at\": %.6f}\n",
                 WTERMSIG(status), now());
    else
        snprintf(body, sizeof body, "{\"exit_code\": %d, \"signal\": 0, \"finished_at\": %.6f}\n",
                 WEXITSTATUS(status), now());
    snprintf(tmp, sizeof tmp, "%s.tmp", S.exitp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (write(fd, body, strlen(body)) < 0) { /* rename below still publishes what is there */ }
    fsync(fd);
    close(fd);
    rename(tmp, S.exitp);
}

static int wait_for(pid_t pid) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    return st;
}

int main(int argc, char **argv) {
    if (argc != 2) { say("error usage: tcl-shim SPEC"); return 2; }
    if (parse_spec(argv[1]) < 0) { say("error cannot read the task spec %s: %s", argv[1], strerror(errno)); return 1; }
    /* Stray terminal or service-manager signals must not cost the task its exit record. */
    signal(SIGHUP, SIG_IGN); signal(SIGINT, SIG_IGN); signal(SIGTERM, SIG_IGN); signal(SIGPIPE, SIG_IGN);
    if (chdir("/") < 0) { /* stay where we are: nothing depends on it */ }
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
        if (S.ns) container_init(report[1], status[1]);
        enter_cgroups(report[1]);
        exec_task(open_task_fds(report[1]), report[1]);
    }
    close(report[1]); close(status[1]);
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
    say("started %d %.6f", pid, now());
    int null = open("/dev/null", O_WRONLY);   /* the agent sees EOF; no later EPIPE */
    dup2(null, 1);
    int st = wait_for(pid);
    if (S.ns) {
        int task_st;
        /* no status from the init: it was killed (cgroup.kill, OOM), and that is the exit */
        if (read(status[0], &task_st, sizeof task_st) == sizeof task_st) st = task_st;
    }
    write_exit(st);
    return 0;
}
