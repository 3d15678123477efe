"""The float64 token recurrence (SPEC §2) that the tests compare against, and a stand-in for the op
sgdn::chunk_gdn_fwd built on it, for tests of the Python layer on machines without a GPU."""
import torch


def token_recurrence(q, k, v, g, beta, scale, initial_state=None):
    """One sequence batch [B, T, ...] in float64: S̃ = e^g S; S = S̃ + β k (v − S̃ᵀk)ᵀ; o = scale Sᵀ q."""
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    q = q.repeat_interleave(HV // H, dim=2)
    k = k.repeat_interleave(HV // H, dim=2)
    if initial_state is None:
        S = torch.zeros(B, HV, K, V, dtype=torch.float64, device=q.device)
    else:
        S = initial_state.double().clone()
    o = torch.empty(B, T, HV, V, dtype=torch.float64, device=q.device)
    for t in range(T):
        S = S * torch.exp(g[:, t])[..., None, None]
        kt = k[:, t]
        err = v[:, t] - torch.einsum("bhkv,bhk->bhv", S, kt)
        S = S + torch.einsum("bhk,bhv->bhkv", kt, beta[:, t][..., None] * err)
        o[:, t] = scale * torch.einsum("bhkv,bhk->bhv", S, q[:, t])
    return o, S


def packed_recurrence(q, k, v, g, beta, scale=None, initial_state=None, cu_seqlens=None, l2norm=False):
    """FLA's semantics in float64: batches, or sequences packed along T by cu_seqlens; returns (o, states)."""
    if l2norm:
        q = q.double() / torch.sqrt((q.double() ** 2).sum(-1, keepdim=True) + 1e-6)
        k = k.double() / torch.sqrt((k.double() ** 2).sum(-1, keepdim=True) + 1e-6)
    scale = q.shape[-1] ** -0.5 if scale is None or scale <= 0 else scale
    if cu_seqlens is None:
        return token_recurrence(q, k, v, g, beta, scale, initial_state)
    bounds = cu_seqlens.tolist()
    outs, states = [], []
    for s, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        s0 = None if initial_state is None else initial_state[s:s + 1]
        o, S = token_recurrence(q[:, a:b], k[:, a:b], v[:, a:b], g[:, a:b], beta[:, a:b], scale, s0)
        outs.append(o)
        states.append(S)
    return torch.cat(outs, dim=1), torch.cat(states, dim=0)


def reference_op(q, k, v, g, beta, cu_seqlens, initial_state, scale, output_final_state, return_events,
                 output_dtype, **settings):
    """What sgdn::chunk_gdn_fwd returns for the dense configuration, from the float64 recurrence (no events)."""
    o, S = packed_recurrence(q, k, v, g, beta, scale, initial_state, cu_seqlens)
    state = S.float() if output_final_state else q.new_empty((0,), dtype=torch.float32)
    return (o.to(output_dtype), state, q.new_empty((0,), dtype=torch.uint8), q.new_empty((0,), dtype=torch.float32),
            q.new_empty((0, 0), dtype=torch.int32), q.new_empty((0,), dtype=torch.int32))
