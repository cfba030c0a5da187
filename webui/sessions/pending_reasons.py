# SPDX-License-Identifier: GPL-3.0-or-later
"""Why a session waits, in words: Slurm's pending reason (``squeue %r``, slurmrestd's ``state_reason``) for the
dashboard and the API. A reason Slurm adds details to (``ReqNodeNotAvail, UnavailableNodes:node1``) is looked up by
its first part; an unknown one is shown as Slurm gives it.
"""

from __future__ import annotations

#: Slurm's reason code -> what it means for the user (squeue(1) "JOB REASON CODES", Slurm 22.05)
REASONS: dict[str, str] = {
    "None": "Queued; the scheduler has not looked at it yet.",
    "Resources": "Waiting for free resources: the nodes it fits on are busy.",
    "Priority": "Waiting behind jobs with a higher priority.",
    "BeginTime": "Waiting for its start time.",
    "Dependency": "Waiting for another job to finish first.",
    "DependencyNeverSatisfied": "It waits for a job that failed, so it will never start: stop it.",
    "JobHeldUser": "Held by you: release it (scontrol release) to let it start.",
    "JobHeldAdmin": "Held by an administrator.",
    "ReqNodeNotAvail": "The nodes it needs are down, drained or reserved right now.",
    "Nodes required for job are DOWN": "The nodes it needs are down, drained or reserved right now.",
    "Reservation": "Waiting for its reservation to start.",
    "NodeDown": "A node it needs is down.",
    "PartitionDown": "Its partition is down.",
    "PartitionInactive": "Its partition does not start jobs right now.",
    "PartitionNodeLimit": "It asks for more nodes than its partition allows, or the partition's nodes are down.",
    "PartitionTimeLimit": "Its time limit is over the partition's maximum.",
    "BadConstraints": "No node has what it asks for.",
    "Prolog": "Its node is being prepared.",
    "Cleaning": "Its node is still cleaning up after an earlier run.",
    "Licenses": "Waiting for a license.",
    "InvalidQOS": "Its QOS is not one you may use.",
    "InvalidAccount": "Its account is not one you may use.",
    "QOSMaxGRESPerUser": "You already use all the GPUs sessions may have at once: it starts when one of yours ends.",
    "QOSMaxJobsPerUserLimit": "You already run as many jobs as this QOS allows: it starts when one of them ends.",
    "QOSGrpGRES": "All the GPUs this QOS may use are taken: it starts when one is free.",
    "QOSMaxWallDurationPerJobLimit": "Its time limit is over what this QOS allows.",
    "AssocGrpGRES": "You already use all the GPUs your limit allows (in all your jobs): it starts when one ends.",
    "AssocMaxJobsLimit": "You already run as many jobs as your limit allows: it starts when one of them ends.",
    "AssocGrpGRESMinutes": "Your GPU budget for this month is used up, or too little of it is left for its time limit.",
    "AssocGrpGRESRunMinutes": "Your running jobs already hold as many GPU-minutes as your limit allows.",
    "AssocGrpJobsLimit": "Your group already runs as many jobs as its limit allows.",
    "launch failed requeued held": "Slurm could not start it on a node and holds it: ask an administrator.",
}


def explain(reason: str) -> str:
    """Slurm's pending reason in words; a limit Slurm names but this table does not, by its kind; else as it is."""
    reason = (reason or "").strip()
    if not reason:
        return ""
    key = reason.split(",", 1)[0].strip()
    if key in REASONS:
        return REASONS[key]
    if key.startswith("QOS"):
        return f"A limit of its QOS holds it (Slurm: {reason})."
    if key.startswith("Assoc"):
        return f"One of your limits holds it (Slurm: {reason})."
    return reason
