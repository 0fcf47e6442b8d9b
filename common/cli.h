// The `attn` command line (CLI11): run one module on one shape, list modules, show the
// device, sweep a benchmark. Everything is in run_cli() so tests can drive it in-process.
//
//   attn run --module 1 --impl solution --batch 2 --heads 8 --seq-q 1024 --seq-k 1024 --dim 64
//            [--kv-heads 2] [--causal] [--layout bshd] [--verify] [--time] [--warmup 5]
//            [--iters 20] [--seed 7] [--q q.npy --k k.npy --v v.npy] [--out o.npy]
//            [--dtype f32|f16|bf16]   (default: the module's own: f32 for 00-06, bf16 from 07)
//   Composable Kernel spellings work too: --seq_len 1024 (= --seq), --head_dim 64 (= --dim),
//   --kv_heads 2, --verify=1, --time=0.
//   attn list | attn info | attn bench --modules 1 [--kv-heads 8] [--dtype bf16] --out results.json
//
// Inference modules (module 10, common/paged.h) take lengths per sequence instead of --seq:
//   attn run --module 10 --seqlens-k 1,17,4096 [--seq-q 1] [--heads 32 --kv-heads 8 --dim 128]
//            [--page-size 16] [--shuffle-pages] [--causal] [--dtype bf16|f16] [--verify] [--time]
//   attn run --module 10 --random-seqlens 4096 --batch 8 --seed 7 ...
//   attn run --module 10 --q q.npy --k-cache k.npy --v-cache v.npy --block-table t.npy
//            --seqlens-k 1,17,4096 [--out o.npy]        (Q [B,Sq,H,D], caches [P,page,KVH,D])
//   attn run --module 10 --varlen --seqlens-q 5,1,9 --seqlens-k 5,30,9 [--q q.npy --k k.npy
//            --v v.npy]                                 (packed [total, heads, dim])
//   attn bench --modules 10 [--seqlens-k ... | --random-seqlens MAX --batch N] [--page-size 16]
//            [--shuffle-pages]
// Flags of one kind of module given to the other (--layout or --seq-k with module 10,
// --seqlens-k with a dense module) are refused in one line.
//
// Exit codes: 0 success, 1 a check failed or the run could not be done (one line says why),
// 2 bad command line.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace attn {

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace attn
