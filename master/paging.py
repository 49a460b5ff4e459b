"""`List` pages: newest first, a default page size, and a token that resumes after the
last job of the previous page (stable while jobs are added, unlike an offset).

Jobs live in memory while they can change (and a while after) and on disk until their
retention ends; a page merges both, memory winning for a job in both (it may be a step
ahead of the disk)."""

from __future__ import annotations

from typing import Protocol

from tcluster.domain.errors import InvalidArgument
from tcluster.domain.fedidentity import reader_of
from tcluster.domain.model import Job, JobState

DEFAULT_PAGE = 100
MAX_PAGE = 1000


class JobIndex(Protocol):
    def job_keys(self, states: list[str], queue: str, before: tuple[float, str] | None,
                 limit: int, owner: str = "") -> tuple[list[tuple[float, str]], int]: ...


def _token(key: tuple[float, str]) -> str:
    return f"{key[0]!r}/{key[1]}"


def token_after(job: Job) -> str:
    """The token of the page that starts after `job` (a page cut short by bytes)."""
    return _token((job.submitted_at, job.id))


def _parse_token(token: str) -> tuple[float, str]:
    when, sep, job_id = token.partition("/")
    try:
        if not sep or len(token) > 200:
            raise ValueError
        return float(when), job_id
    except ValueError:
        raise InvalidArgument("page_token", f"{token[:40]!r} is not a token from a previous reply") from None


def page_of_jobs(jobs: dict[str, Job], index: JobIndex, states: set[JobState], queue: str, limit: int,
                 all_jobs: bool, page_token: str, owner: str = "") -> tuple[list[str], str, int]:
    """(job ids of this page, the next page's token or "", how many match in all)."""
    if limit < 0 or limit > MAX_PAGE:
        raise InvalidArgument("limit", f"{limit} is out of range; allowed 0..{MAX_PAGE} (0: {DEFAULT_PAGE}), "
                              "or ask for all")
    size = MAX_PAGE if all_jobs else (limit or DEFAULT_PAGE)
    before = _parse_token(page_token) if page_token else None
    in_memory = {(j.submitted_at, j.id) for j in jobs.values()
                 if (not states or j.state in states) and (not queue or j.spec.queue == queue)
                 and (not owner or owner in (j.spec.owner, reader_of(j.spec.owner, j.spec.labels)))}
    stored, total = index.job_keys(sorted(s.value for s in states), queue, before, size + len(jobs), owner)
    keys = {k for k in stored if k[1] not in jobs} | {k for k in in_memory if before is None or k < before}
    ordered = sorted(keys, reverse=True)
    total = max(total, len(in_memory))
    page = ordered[:size]
    more = len(ordered) > size
    return [k[1] for k in page], (_token(page[-1]) if more and page else ""), total
