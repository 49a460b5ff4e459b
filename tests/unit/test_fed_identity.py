"""Issue 35: a federated task sees the federated job's identity, not its LM job's
(tcluster/domain/fedidentity.py), from the labels the LM writes (federation_live.py)."""

from __future__ import annotations

from dataclasses import replace

from tcluster.agent.tasks import task_identity_env
from tcluster.domain import fedidentity
from tcluster.domain.fedidentity import FEDERATION_OWNER, federated_identity, identity_labels
from tcluster.domain.launch import Launch
from tcluster.domain.model import JobSpec
from tcluster.domain.resources import Resources
from tcluster.master.core import pinning
from tcluster.master.features.federation_lm import fed_labels

SPEC = JobSpec(("true",), Resources(cpu=1), tasks=1)


def lm_job_spec(task_id: str, request_id: str, count: int, gm_name: str) -> JobSpec:
    labels = (*fed_labels(1, task_id, "a", "n1"), *identity_labels(task_id, request_id, count, gm_name))
    return replace(SPEC, owner=FEDERATION_OWNER, labels=labels)


def test_the_domain_and_the_lm_name_the_same_labels_and_owner() -> None:
    assert (fedidentity.FED_TASK, fedidentity.FEDERATION_OWNER) == (pinning.FED_TASK, pinning.FEDERATION_OWNER)


def test_a_federated_task_sees_the_federated_job_its_index_count_attempt_lm_job_and_gm() -> None:
    spec = lm_job_spec("f1-7.12", "f1-7.12:3", 16, "gm-east")
    env = dict(task_identity_env(Launch("abcd0123.0", 0, "abcd0123", 0, spec)))
    assert env == {"TCL_JOB_ID": "f1-7", "TCL_TASK_INDEX": "12", "TCL_TASK_COUNT": "16", "TCL_ATTEMPT": "3",
                   "TCL_LM_JOB_ID": "abcd0123", "TCL_FEDERATION_GM": "gm-east"}


def test_a_federated_arrays_task_also_sees_its_array_index_as_a_local_arrays_does() -> None:
    labels = (*fed_labels(1, "f0-3.40", "a", "n1"), *identity_labels("f0-3.40", "f0-3.40:0", 8, "gm0", array=True))
    env = dict(task_identity_env(Launch("abcd0123.0", 0, "abcd0123", 0,
                                        replace(SPEC, owner=FEDERATION_OWNER, labels=labels))))
    assert (env["TCL_TASK_INDEX"], env["TCL_ARRAY_TASK_ID"], env["TCL_TASK_COUNT"]) == ("40", "40", "8")
    plain = dict(task_identity_env(Launch("abcd0123.0", 0, "abcd0123", 0, lm_job_spec("f0-3.40", "f0-3.40:0", 8,
                                                                                        "gm0"))))
    assert "TCL_ARRAY_TASK_ID" not in plain


def test_a_job_ids_dots_stay_in_the_job_id_and_a_bad_attempt_is_zero() -> None:
    labels = identity_labels("f0-a.b.4", "no-attempt", 0, "gm0")
    assert dict(labels)[fedidentity.FED_ATTEMPT] == "0" and dict(labels)[fedidentity.FED_TASK_COUNT] == "1"
    env = dict(federated_identity(FEDERATION_OWNER, ((fedidentity.FED_TASK, "f0-a.b.4"), *labels), "lmjob") or ())
    assert (env["TCL_JOB_ID"], env["TCL_TASK_INDEX"]) == ("f0-a.b", "4")


def test_only_the_federations_jobs_are_read_this_way() -> None:
    spec = lm_job_spec("f1-7.12", "f1-7.12:3", 16, "gm-east")
    # A user's job cannot carry these labels (refused at Submit); were it to, the owner still decides.
    assert federated_identity("alice", spec.labels, "j") is None
    env = dict(task_identity_env(Launch("abcd0123.0", 0, "abcd0123", 0, replace(spec, owner="alice"))))
    assert env["TCL_JOB_ID"] == "abcd0123" and "TCL_LM_JOB_ID" not in env
    # A federated job without a well-formed task label: the LM job's own identity.
    for bad in ("", "f1-7", "f1-7.x", ".3"):
        assert federated_identity(FEDERATION_OWNER, ((fedidentity.FED_TASK, bad),), "j") is None


def test_a_federated_lm_job_reads_as_its_users_and_any_other_job_as_its_owners() -> None:
    user = ((fedidentity.FED_USER, "alice"),)
    assert fedidentity.reader_of(FEDERATION_OWNER, user) == "alice"
    assert fedidentity.reader_of(FEDERATION_OWNER, ()) == FEDERATION_OWNER     # an insecure LM names nobody
    assert fedidentity.reader_of("bob", user) == "bob"      # a user's job cannot carry the label; never read
