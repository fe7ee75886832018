"""FBGEMM-style row-wise quantized embedding rows (int8 and int4), packed into uint8 bytes.

Layout of one row, as FBGEMM's inference table-batched embeddings store it
(`IntNBitTableBatchedEmbeddingBagsCodegen`, SparseType.INT8 / INT4;
docs/contracts.md#fbgemm-row-formats):

    [ scale: fp16 (2 B) | bias: fp16 (2 B) | D values of `bits` bits | zero padding ]

int8 holds one value a byte (D + 4 bytes), int4 two values a byte, element 2i in the low
nibble (D/2 + 4 bytes); each row is padded to a multiple of 16 bytes. Quantisation follows
FBGEMM's `FloatToFusedNBitRowwiseQuantizedSBHalf`: bias = fp16(min(row)),
scale = fp16((max(row) - bias) / (2**bits - 1)) (1.0 for a constant row),
q = clamp(round((x - bias) / scale), 0, 2**bits - 1), and x' = q * scale + bias.
Error per element: at most half a step, (max - min) / (2**bits - 1) / 2, plus the fp16
rounding of scale and bias (relative 2**-11 each).
"""

from __future__ import annotations

import torch

__all__ = ["ROW_ALIGN_BYTES", "QPARAM_BYTES", "SERVING_BITS", "row_bytes", "pack_rows",
           "unpack_rows"]

# FBGEMM aligns every quantized row to 16 bytes (kINT8QparamsBytes / row alignment in
# fbgemm_gpu split_table_batched_embeddings, docs/contracts.md#fbgemm-row-formats).
ROW_ALIGN_BYTES = 16
# fp16 scale + fp16 bias in front of every row, bytes.
QPARAM_BYTES = 4
# Bits per stored value for each serving format.
SERVING_BITS = {"int8": 8, "int4": 4}


def row_bytes(dim: int, bits: int) -> int:
    """Bytes of one packed row (qparams + values), rounded up to ROW_ALIGN_BYTES."""
    if bits not in (4, 8):
        raise ValueError(f"bits = {bits}: only 8 and 4 are packed")
    if bits == 4 and dim % 2:
        raise ValueError(f"dim = {dim}: int4 packs two values a byte and needs an even dim")
    raw = QPARAM_BYTES + dim * bits // 8
    return -(-raw // ROW_ALIGN_BYTES) * ROW_ALIGN_BYTES


def pack_rows(rows: torch.Tensor, bits: int) -> torch.Tensor:
    """Quantize float rows [N, D] to packed uint8 rows [N, row_bytes(D, bits)]."""
    n, dim = rows.shape
    levels = (1 << bits) - 1
    x = rows.detach().to(torch.float32)
    bias16 = x.amin(dim=1).to(torch.float16)
    bias = bias16.to(torch.float32)
    scale16 = ((x.amax(dim=1) - bias) / levels).to(torch.float16)
    scale16 = torch.where(
        (scale16 > 0) & torch.isfinite(scale16), scale16, torch.ones_like(scale16)
    )
    scale = scale16.to(torch.float32)
    q = torch.round((x - bias[:, None]) / scale[:, None]).clamp_(0, levels).to(torch.uint8)
    if bits == 4:
        q = q[:, 0::2] | (q[:, 1::2] << 4)
    out = torch.zeros((n, row_bytes(dim, bits)), dtype=torch.uint8, device=rows.device)
    out[:, 0:2] = scale16.view(torch.uint8).view(n, 2)
    out[:, 2:4] = bias16.view(torch.uint8).view(n, 2)
    out[:, QPARAM_BYTES : QPARAM_BYTES + q.shape[1]] = q
    return out


def unpack_rows(packed: torch.Tensor, dim: int, bits: int, dtype: torch.dtype) -> torch.Tensor:
    """Dequantize packed rows [..., row_bytes] to [..., dim] in `dtype`."""
    scale = packed[..., 0:2].contiguous().view(torch.float16).to(torch.float32)
    bias = packed[..., 2:4].contiguous().view(torch.float16).to(torch.float32)
    data = packed[..., QPARAM_BYTES : QPARAM_BYTES + dim * bits // 8]
    if bits == 4:
        q = torch.stack((data & 0x0F, data >> 4), dim=-1).flatten(-2)
    else:
        q = data
    return (q.to(torch.float32) * scale + bias).to(dtype)
