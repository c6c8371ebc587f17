"""Machines for the strict NVML model, modelled on real hardware.

- ``dgx_a100_mixed_mig``: a DGX A100 (eight A100-SXM4-40GB), modelled on NVIDIA's public mock of
  one (go-nvml ``pkg/nvml/mock/dgxa100/dgxa100.go``: names, memory, compute capability, driver
  550.54.15, CUDA 12.4, the MIG profiles' slice, multiprocessor, engine and memory figures). Two
  of its GPUs have MIG on with different profiles side by side (the "mixed" strategy). Where the
  mock simplifies, the model follows what real A100s report (``nvidia-smi mig -lgip``): profile
  IDs are not the profile indices (1g.5gb is index 0, ID 19; 2g.10gb index 1, ID 14; 3g.20gb
  index 2, ID 9; 4g.20gb index 3, ID 5; 7g.40gb index 4, ID 0; 1g.5gb+me index 7, ID 20; 1g.10gb
  index 9, ID 15), and the PCI bus IDs are a DGX A100's.
- ``h100_box``: eight H100 80GB HBM3, MIG-capable with MIG off.
- ``no_ecc_workstation``: two RTX A6000 (brand NvidiaRTX) with ECC off, no MIG.
- ``geforce_workstation``: one GeForce RTX 4090 (brand GeForce, no ECC, no MIG).
- ``eight_gpu_machine``: the H100 box with MIG on one GPU (the older tests' machine).
"""

from __future__ import annotations

from pathlib import Path

import pynvml
import yaml

from .model import Gpu, MigInstance, Profile, StrictNVML

GIB = 2**30

# A100-SXM4-40GB GPU instance profiles by NVML_GPU_INSTANCE_PROFILE_* index.
A100_40GB_PROFILES = {
    p.index: p
    for p in (
        Profile(pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, "MIG 1g.5gb", 1, 7, 14, 1, 0, 0, 0, 0, 4864),
        Profile(pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, "MIG 2g.10gb", 2, 3, 28, 2, 1, 0, 0, 0, 9856),
        Profile(pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, "MIG 3g.20gb", 3, 2, 42, 3, 2, 0, 0, 0, 19968),
        Profile(pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, "MIG 4g.20gb", 4, 1, 56, 4, 2, 0, 0, 0, 19968),
        Profile(pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, "MIG 7g.40gb", 7, 1, 98, 7, 5, 0, 1, 1, 40192),
        Profile(pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, "MIG 1g.5gb+me", 1, 1, 14, 1, 1, 0, 1, 1, 4864),
        Profile(pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, "MIG 1g.10gb", 1, 4, 14, 1, 1, 0, 0, 0, 9856),
    )
}

# H100 80GB HBM3: the same indices and IDs; figures close to an H100's (only their shape matters in
# these tests: the box has MIG off until a test reconfigures a GPU).
H100_80GB_PROFILES = {
    p.index: p
    for p in (
        Profile(pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 19, "MIG 1g.10gb", 1, 7, 16, 1, 1, 0, 1, 0, 9856),
        Profile(pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE, 14, "MIG 2g.20gb", 2, 3, 32, 2, 2, 0, 2, 0, 20096),
        Profile(pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE, 9, "MIG 3g.40gb", 3, 2, 60, 3, 3, 0, 3, 0, 40320),
        Profile(pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE, 5, "MIG 4g.40gb", 4, 1, 64, 4, 4, 0, 4, 0, 40320),
        Profile(pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE, 0, "MIG 7g.80gb", 7, 1, 132, 8, 7, 0, 7, 1, 80896),
        Profile(pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, 20, "MIG 1g.10gb+me", 1, 1, 16, 1, 1, 0, 1, 1, 9856),
        Profile(pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 15, "MIG 1g.20gb", 1, 4, 26, 1, 1, 0, 1, 0, 20096),
    )
}


def _uuid(prefix: str, n: int, m: int = 0) -> str:
    return f"{prefix}-{n:08x}-{m:04x}-4{n:03x}-8000-a100{m:08x}"


GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "nodeagent"
MODELS = {"A100-SXM4-40GB": ("NVIDIA A100-SXM4-40GB", 42949672960, A100_40GB_PROFILES)}


# Memory slices a GPU instance of each profile index spans (``nvmlGpuInstancePlacement_t.size``):
# 8 units on A100/H100; 3g and 4g take 4, 7g all 8, 1g.10gb (REV2) 2.
PLACEMENT_SIZES = {
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: 1,
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: 2,
    pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE: 4,
    pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE: 4,
    pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE: 8,
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: 1,
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: 2,
}


def load_machine(path: Path) -> StrictNVML:
    """A machine from a YAML description (``tests/golden/nodeagent/*.input.yaml``)."""
    doc = yaml.safe_load(path.read_text())
    group = doc["gpus"]
    name, memory, profiles = MODELS[group["model"]]
    by_name = {p.name.removeprefix("MIG "): p for p in profiles.values()}
    gpus = []
    for i in range(group["count"]):
        gpu = Gpu(
            index=i,
            minor=i,
            uuid=_uuid("GPU", i),
            name=name,
            brand=pynvml.NVML_BRAND_NVIDIA,
            arch=pynvml.NVML_DEVICE_ARCH_AMPERE,
            cc=(8, 0),
            memory=memory,
            bus_id=f"00000000:{group['busIds'][i]}:00.0",
            mig_capable=True,
            profiles=profiles,
        )
        for j, mig in enumerate((group.get("mig") or {}).get(i) or [], start=1):
            profile = by_name[mig["profile"]]
            gpu.instances.append(
                MigInstance(
                    gi_id=mig["gi"],
                    ci_id=mig["ci"],
                    profile_index=profile.index,
                    placement_start=mig["start"],
                    placement_size=PLACEMENT_SIZES[profile.index],
                    uuid=_uuid("MIG", i, j),
                )
            )
        gpu.mig_enabled = bool(gpu.instances)
        gpus.append(gpu)
    return StrictNVML(gpus, driver_version=doc["driverVersion"], cuda=doc["cudaDriverVersion"])


def dgx_a100_mixed_mig() -> StrictNVML:
    """GPUs 0-5 whole; GPU 6 with 3g.20gb + 2g.10gb + 1g.5gb, GPU 7 with 4g.20gb + 2g.10gb +
    1g.5gb+me (``dgx-a100-mixed-mig.input.yaml``)."""
    return load_machine(GOLDEN / "dgx-a100-mixed-mig.input.yaml")


def h100_box() -> StrictNVML:
    gpus = [
        Gpu(
            index=i,
            minor=i,
            uuid=f"GPU-{i:08x}-0000-4000-8000-{0x100100 + i:012x}",
            name="NVIDIA H100 80GB HBM3",
            brand=pynvml.NVML_BRAND_NVIDIA,
            arch=pynvml.NVML_DEVICE_ARCH_HOPPER,
            cc=(9, 0),
            memory=80 * GIB,
            bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0",
            mig_capable=True,
            profiles=H100_80GB_PROFILES,
        )
        for i in range(8)
    ]
    return StrictNVML(gpus, driver_version="570.124.06", cuda=12080)


def no_ecc_workstation() -> StrictNVML:
    gpus = [
        Gpu(
            index=i,
            minor=i,
            uuid=f"GPU-{i:08x}-0000-4000-8000-a6000000000{i}",
            name="NVIDIA RTX A6000",
            brand=pynvml.NVML_BRAND_NVIDIA_RTX,
            arch=pynvml.NVML_DEVICE_ARCH_AMPERE,
            cc=(8, 6),
            memory=48 * GIB,
            bus_id=f"00000000:{0x41 + i:02X}:00.0",
            ecc=False,
        )
        for i in range(2)
    ]
    return StrictNVML(gpus, driver_version="550.54.15", cuda=12040)


def geforce_workstation() -> StrictNVML:
    gpus = [
        Gpu(
            index=0,
            minor=0,
            uuid="GPU-00000000-0000-4000-8000-409000000000",
            name="NVIDIA GeForce RTX 4090",
            brand=pynvml.NVML_BRAND_GEFORCE,
            arch=pynvml.NVML_DEVICE_ARCH_ADA,
            cc=(8, 9),
            memory=24 * GIB,
            bus_id="00000000:01:00.0",
            ecc=False,
        )
    ]
    return StrictNVML(gpus, driver_version="570.124.06", cuda=12080)


def eight_gpu_machine() -> StrictNVML:
    """The older tests' machine: eight H100s, GPU 7 with MIG on (two 3g.40gb, one 1g.10gb)."""
    model = h100_box()
    model.reconfigure(
        7,
        [
            MigInstance(
                gi_id=1,
                ci_id=0,
                profile_index=pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE,
                placement_start=0,
                placement_size=4,
                uuid="MIG-70000000-0000-4000-8000-000000000001",
            ),
            MigInstance(
                gi_id=2,
                ci_id=0,
                profile_index=pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE,
                placement_start=4,
                placement_size=4,
                uuid="MIG-70000000-0000-4000-8000-000000000002",
            ),
            MigInstance(
                gi_id=9,
                ci_id=0,
                profile_index=pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE,
                placement_start=6,
                placement_size=1,
                uuid="MIG-70000000-0000-4000-8000-000000000009",
            ),
        ],
    )
    return model
