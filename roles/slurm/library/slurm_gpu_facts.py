#!/usr/bin/python
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read the GPUs of a node with nvidia-smi (no NVML build of Slurm needed).

Parsing lives in carme_runtime.gpu (shipped to the node as module_utils/carme_gpu.py), the same code that
`carme-gpu-facts` runs, so there is one implementation of the nvidia-smi contract.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_gpu_facts
short_description: GPU facts from nvidia-smi for gres.conf
description:
  - Runs C(nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits) and sets the fact
    C(slurm_gpus) with C(available), C(count), C(gpus) (index, uuid, name, memory_mib, type, file) and C(gres_conf).
  - Where nvidia-smi is not installed, C(available) is false and C(count) 0.
options:
  nvidia_smi: {description: Name or path of nvidia-smi, type: str, default: nvidia-smi}
author: Carme developers
"""

EXAMPLES = r"""
- slurm_gpu_facts:
- ansible.builtin.debug:
    var: slurm_gpus.count
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.carme_gpu import NVIDIA_SMI_QUERY_ARGV
from ansible.module_utils.carme_gpu import GpuFactsError
from ansible.module_utils.carme_gpu import gpu_facts
from ansible.module_utils.carme_gpu import parse_nvidia_smi


def main():
    module = AnsibleModule(argument_spec={"nvidia_smi": {"type": "str", "default": "nvidia-smi"}}, supports_check_mode=True)
    exe = module.get_bin_path(module.params["nvidia_smi"])
    if exe is None:
        facts = {"available": False, "count": 0, "gpus": [], "gres_conf": [], "node_gres": ""}
        module.exit_json(changed=False, ansible_facts={"slurm_gpus": facts})
    argv = [exe, *NVIDIA_SMI_QUERY_ARGV[1:]]
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"nvidia-smi failed (rc {rc}): {(err or out).strip()}", argv=argv)
    try:
        gpus = parse_nvidia_smi(out)
    except GpuFactsError as exc:
        module.fail_json(msg=f"cannot parse nvidia-smi output: {exc}", argv=argv)
    facts = gpu_facts(gpus)
    facts["available"] = True
    module.exit_json(changed=False, ansible_facts={"slurm_gpus": facts})


if __name__ == "__main__":
    main()
