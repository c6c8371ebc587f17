"""A strict model of NVML for tests: nvidia-ml-py's function names over machines modelled on real
hardware, with NVML's documented argument semantics and return codes (``model.py``), and the
machines (``machines.py``)."""

from .machines import dgx_a100_mixed_mig, eight_gpu_machine, geforce_workstation, h100_box, no_ecc_workstation
from .model import Gpu, MigInstance, Profile, StrictNVML

__all__ = [
    "Gpu",
    "MigInstance",
    "Profile",
    "StrictNVML",
    "dgx_a100_mixed_mig",
    "eight_gpu_machine",
    "geforce_workstation",
    "h100_box",
    "no_ecc_workstation",
]
