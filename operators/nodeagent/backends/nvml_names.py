"""How NVIDIA's DRA driver spells what NVML reports (pure): brands, architectures, versions, MIG
profile names. Each table is NVIDIA's own, so CEL written for their driver matches.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pynvml

# go-nvlib pkg/nvlib/device/device.go, (*device).GetBrandAsString. Brands go-nvlib does not know
# (NVML_BRAND_NVIDIA_DLA, _VGAMEDEV, _NPU, newer ones) are "Unknown" here, where go-nvlib fails.
BRANDS = {
    pynvml.NVML_BRAND_UNKNOWN: "Unknown",
    pynvml.NVML_BRAND_QUADRO: "Quadro",
    pynvml.NVML_BRAND_TESLA: "Tesla",
    pynvml.NVML_BRAND_NVS: "NVS",
    pynvml.NVML_BRAND_GRID: "Grid",
    pynvml.NVML_BRAND_GEFORCE: "GeForce",
    pynvml.NVML_BRAND_TITAN: "Titan",
    pynvml.NVML_BRAND_NVIDIA_VAPPS: "NvidiaVApps",
    pynvml.NVML_BRAND_NVIDIA_VPC: "NvidiaVPC",
    pynvml.NVML_BRAND_NVIDIA_VCS: "NvidiaVCS",
    pynvml.NVML_BRAND_NVIDIA_VWS: "NvidiaVWS",
    pynvml.NVML_BRAND_NVIDIA_CLOUD_GAMING: "NvidiaCloudGaming",
    pynvml.NVML_BRAND_QUADRO_RTX: "QuadroRTX",
    pynvml.NVML_BRAND_NVIDIA_RTX: "NvidiaRTX",
    pynvml.NVML_BRAND_NVIDIA: "Nvidia",
    pynvml.NVML_BRAND_GEFORCE_RTX: "GeForceRTX",
    pynvml.NVML_BRAND_TITAN_RTX: "TitanRTX",
}

# go-nvlib (*device).GetArchitectureAsString (Orin and Rubin where this nvidia-ml-py names them).
ARCHITECTURES = {
    pynvml.NVML_DEVICE_ARCH_KEPLER: "Kepler",
    pynvml.NVML_DEVICE_ARCH_MAXWELL: "Maxwell",
    pynvml.NVML_DEVICE_ARCH_PASCAL: "Pascal",
    pynvml.NVML_DEVICE_ARCH_VOLTA: "Volta",
    pynvml.NVML_DEVICE_ARCH_TURING: "Turing",
    pynvml.NVML_DEVICE_ARCH_AMPERE: "Ampere",
    pynvml.NVML_DEVICE_ARCH_ADA: "Ada Lovelace",
    pynvml.NVML_DEVICE_ARCH_HOPPER: "Hopper",
    pynvml.NVML_DEVICE_ARCH_BLACKWELL: "Blackwell",
    **{
        getattr(pynvml, f"NVML_DEVICE_ARCH_{key}"): label
        for key, label in (("T23X", "Orin"), ("RUBIN", "Rubin"))
        if hasattr(pynvml, f"NVML_DEVICE_ARCH_{key}")
    },
}

# go-nvlib pkg/nvlib/device/mig_profile.go, NewMigProfile: GPU slices per profile index and the
# "+me" (media extensions) attribute of the REV1 profiles.
_P = pynvml
PROFILE_SLICES = {
    _P.NVML_GPU_INSTANCE_PROFILE_1_SLICE: 1,
    _P.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: 1,
    _P.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: 1,
    _P.NVML_GPU_INSTANCE_PROFILE_2_SLICE: 2,
    _P.NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1: 2,
    _P.NVML_GPU_INSTANCE_PROFILE_3_SLICE: 3,
    _P.NVML_GPU_INSTANCE_PROFILE_4_SLICE: 4,
    _P.NVML_GPU_INSTANCE_PROFILE_6_SLICE: 6,
    _P.NVML_GPU_INSTANCE_PROFILE_7_SLICE: 7,
    _P.NVML_GPU_INSTANCE_PROFILE_8_SLICE: 8,
}
MEDIA_EXTENSIONS = {_P.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, _P.NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1}


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def brand(value: int) -> str:
    return BRANDS.get(value, "Unknown")


def architecture(value: int) -> str:
    return ARCHITECTURES.get(value, "Unknown")


def semver(version: str) -> str:
    """ "550.54.15" -> "550.54.15", "12.4" -> "12.4.0", "9.0" -> "9.0.0" (NVIDIA normalises the same way)."""
    parts = [str(int(p)) for p in re.findall(r"\d+", version)[:3]]
    return ".".join((parts + ["0", "0", "0"])[:3])


def mig_memory_gb(device_memory_bytes: int, mig_memory_mb: int) -> int:
    """go-nvlib mig_profile.go, getMigMemorySizeGB: the instance's share of the GPU's memory in
    eighths, rounded up, times the GPU's memory in whole GB."""
    fraction = math.ceil(mig_memory_mb * 2**20 / device_memory_bytes * 8) / 8
    total_gb = (device_memory_bytes + 2**30 - 1) // 2**30
    return int(_round_half_away(fraction * total_gb))


def _round_half_away(x: float) -> float:
    return math.floor(x + 0.5)  # Go's math.Round for the positive values here


def mig_profile_name(profile_index: int, mig_memory_mb: int, device_memory_bytes: int) -> str:
    """``3g.20gb``, ``1g.5gb+me``: go-nvlib's MigProfileInfo.String for a GPU instance with one
    compute instance spanning it (C == G, the only kind NVIDIA's driver publishes)."""
    slices = PROFILE_SLICES.get(profile_index)
    if slices is None:
        raise ValueError(f"unknown GPU instance profile index {profile_index}")
    suffix = "+me" if profile_index in MEDIA_EXTENSIONS else ""
    return f"{slices}g.{mig_memory_gb(device_memory_bytes, mig_memory_mb)}gb{suffix}"
