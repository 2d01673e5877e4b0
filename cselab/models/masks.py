"""Attention masks handed to a transformer: the additive 4-D form its layers take, and the form a
Hugging Face model is given inside a training step so that it never waits on the device."""

from __future__ import annotations

import os

import torch


def extended_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[B, T]`` 0/1 -> the additive ``[B, 1, 1, T]`` mask a transformer layer takes."""
    return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


def model_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """The attention mask to give a Hugging Face model inside a training step. On CUDA the
    additive ``[B, 1, 1, T]`` mask in the dtype attention runs in (autocast's when on), which
    the model uses as it is; from a 2-D mask it first asks whether every token is real
    (``mask.all()``: the host waits for the device). Elsewhere the 2-D mask, unchanged."""
    if not sync_free(attention_mask.device):
        return attention_mask
    device = attention_mask.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else torch.float32
    return extended_mask(attention_mask, dtype)


def sync_free(device: torch.device) -> bool:
    """Whether a step's code must not make the host wait for the device: on CUDA, or anywhere
    with ``CSELAB_SYNC_FREE=1`` (the GPU acceptance command's CPU run takes CUDA's paths so that
    its no-sync check covers them)."""
    return device.type == "cuda" or os.environ.get("CSELAB_SYNC_FREE") == "1"
