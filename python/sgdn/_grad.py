"""The backward pass of the dense configuration: the forward recomputed in torch (the chunked WY form of the
recurrence, differentiable) and differentiated by autograd. Correct, not fast: a reference backward so that
the op can sit in a fine-tuning run; the sparse path has no gradient here."""
from __future__ import annotations

import torch


def _chunk(q, k, v, g, beta, S, scale):
    """One chunk of one batch of sequences, [N, HV, C, ...] and S [N, HV, K, V], in the WY form:
    (I + A) U = β (V - e^G K S), A_ij = β_i e^(G_i - G_j) k_i.k_j (j < i), with G the running sum of g;
    o_i = scale (e^G_i S^T q_i + sum_{j<=i} e^(G_i - G_j) (q_i.k_j) u_j),
    S' = e^G_C S + sum_j e^(G_C - G_j) k_j u_j^T."""
    C = q.shape[-2]
    G = torch.cumsum(g, dim=-1)  # [N, HV, C]
    diff = G[..., :, None] - G[..., None, :]
    lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    decay = torch.exp(torch.where(lower, diff, torch.full_like(diff, -float("inf"))))  # j <= i
    kk = k @ k.transpose(-1, -2)
    A = (beta[..., :, None] * decay * kk).tril(-1)
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    rhs = beta[..., None] * (v - torch.exp(G)[..., None] * (k @ S))
    U = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    o = scale * (torch.exp(G)[..., None] * (q @ S) + (decay * (q @ k.transpose(-1, -2))) @ U)
    tail = torch.exp(G[..., -1:] - G)  # e^(G_C - G_j)
    S = torch.exp(G[..., -1])[..., None, None] * S + (k * tail[..., None]).transpose(-1, -2) @ U
    return o, S


def dense_recurrence(q, k, v, g, beta, scale, initial_state=None, chunk=64):
    """FLA's gated delta rule for one batch [B, T, ...] (sequences of equal length), differentiable, in the
    dtype of the inputs. Returns (o [B, T, HV, V], final state [B, HV, K, V])."""
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    q = q.repeat_interleave(HV // H, dim=2).transpose(1, 2)  # [B, HV, T, K]
    k = k.repeat_interleave(HV // H, dim=2).transpose(1, 2)
    v, g, beta = v.transpose(1, 2), g.transpose(1, 2), beta.transpose(1, 2)
    S = q.new_zeros(B, HV, K, V) if initial_state is None else initial_state.to(q.dtype)
    outs = []
    for t0 in range(0, T, chunk):
        sl = slice(t0, min(t0 + chunk, T))
        o, S = _chunk(q[:, :, sl], k[:, :, sl], v[:, :, sl], g[:, :, sl], beta[:, :, sl], S, scale)
        outs.append(o)
    o = torch.cat(outs, dim=2) if outs else v.new_zeros(B, HV, 0, V)
    return o.transpose(1, 2), S


def packed_dense_recurrence(q, k, v, g, beta, scale, initial_state=None, cu_seqlens=None, chunk=64):
    """dense_recurrence over sequences packed along T by cu_seqlens (read on the host) or a batch."""
    if cu_seqlens is None:
        return dense_recurrence(q, k, v, g, beta, scale, initial_state, chunk)
    bounds = cu_seqlens.tolist()
    outs, states = [], []
    for s, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        s0 = None if initial_state is None else initial_state[s:s + 1]
        o, S = dense_recurrence(q[:, a:b], k[:, a:b], v[:, a:b], g[:, a:b], beta[:, a:b], scale, s0, chunk)
        outs.append(o)
        states.append(S)
    return torch.cat(outs, dim=1), torch.cat(states, dim=0)
