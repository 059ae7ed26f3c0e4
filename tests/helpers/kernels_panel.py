"""A fusion plan with one kernel whose source names its nodes, as the Kernels panel shows it
(tests/views/test_element_view.py, test_kernels_fit.py)."""

from __future__ import annotations

SOURCE = """extern "C" __global__ void k_fwd(const long long* tab, long long R) {
    for (long long s = blockIdx.x; s < R; s += gridDim.x) {
        /* node 4 matmul */
        for (long long c = threadIdx.x; c < 16; c += blockDim.x) {
            v4[c] = acc;
        }
        __syncthreads();
        /* node 5 exp */
        for (long long c = threadIdx.x; c < 16; c += blockDim.x) v5[c] = EXP(v4[c]);
        __syncthreads();
        /* node 6 add */
        v6[c] = v5[c] + v4[c];
    }
}"""


PLAN = {"plan_id": "p", "dtype": "float64", "math": "platform",
        "segments": [{"index": 0, "node_ids": [4, 5, 6], "kind": "row", "rows": 8}],
        "kernels": [{"name": "k_fwd", "role": "forward", "segment": 0, "source": SOURCE,
                     "grid": 8, "block": 32},
                    {"name": "k_bwd", "role": "backward", "segment": 0, "source": "B",
                     "grid": 8, "block": 32}],
        "launches_before": {"forward": 5, "backward": 9, "optimizer": 3, "episode": 17},
        "launches_after": {"forward": 3, "backward": 7, "optimizer": 1, "episode": 11}}
