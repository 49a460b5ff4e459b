"""`List` pages: newest first, a default page size, and a token that resumes after the
last job of the previous page (stable while jobs are added, unlike an offset)."""

from __future__ import annotations

from tcluster.errors import InvalidArgument
from tcluster.model import Job, JobState

DEFAULT_PAGE = 100
MAX_PAGE = 1000


def _token(job: Job) -> str:
    return f"{job.submitted_at!r}/{job.id}"


def _parse_token(token: str) -> tuple[float, str]:
    when, sep, job_id = token.partition("/")
    try:
        if not sep:
            raise ValueError
        return float(when), job_id
    except ValueError:
        raise InvalidArgument("page_token", f"{token[:40]!r} is not a token from a previous reply") from None


def page_of_jobs(jobs: dict[str, Job], states: set[JobState], queue: str, limit: int, all_jobs: bool,
                 page_token: str) -> tuple[list[str], str, int]:
    """(job ids of this page, the next page's token or "", how many match in all)."""
    if limit < 0 or limit > MAX_PAGE:
        raise InvalidArgument("limit", f"{limit} is out of range; allowed 0..{MAX_PAGE} (0: {DEFAULT_PAGE}), "
                              "or ask for all")
    matching = sorted((j for j in jobs.values()
                       if (not states or j.state in states) and (not queue or j.spec.queue == queue)),
                      key=lambda j: (j.submitted_at, j.id), reverse=True)
    start = 0
    if page_token:
        after = _parse_token(page_token)
        start = next((i for i, j in enumerate(matching) if (j.submitted_at, j.id) < after), len(matching))
    if all_jobs:
        return [j.id for j in matching[start:]], "", len(matching)
    size = limit or DEFAULT_PAGE
    page = matching[start:start + size]
    more = start + size < len(matching)
    return [j.id for j in page], (_token(page[-1]) if more and page else ""), len(matching)
