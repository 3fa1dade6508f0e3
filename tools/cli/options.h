// Command-line flags: what to run (one problem, or the bench grid) and how.
#pragma once

#include <flashattn/flashattn.h>

#include <cstdint>
#include <string>
#include <vector>

namespace flashattn::cli {

// One attention problem as the flags describe it; every bench point is one of these too.
struct ProblemSpec {
    fa_dtype dtype = FA_BFLOAT16;
    int batch = 2;
    int seqlen_q = 512, seqlen_k = 512;
    int heads = 8, kv_heads = 8;
    int head_dim = 64;                       // of q and k
    int head_dim_v = 0;                      // of v and out; 0 = head_dim
    bool learnable_sink = false;             // one random sink logit per query head (fp32)
    bool causal = false;
    int window_left = -1, window_right = -1; // -1 = unbounded
    float softcap = 0.0f;                    // 0 = off
    bool alibi = false;
    float dropout = 0.0f;
    float scale = 0.0f;                      // 0 = 1/sqrt(head_dim)
    bool varlen = false;
    uint64_t seed = 0;                       // input data, varlen lengths and dropout
    // --kvcache: a decode step. seqlen_k rows are cached per sequence; seqlen_q new tokens are
    // appended (k_new/v_new) and attend to the cache (fa_kvcache_forward).
    bool kvcache = false;
    bool paged = false;                      // the cache as a block pool with a block table
    int page_size = 16;
    int rotary_dim = 0;                      // rotary embedding of q and the new keys; 0 = off
    bool rotary_interleaved = false;
    int num_splits = 1;                      // split-KV (0 = heuristic)
};

enum class BackendChoice { automatic, cpu, cuda };
enum class CheckMode { automatic, on, off };

struct Options {
    enum class Mode { run, bench } mode = Mode::run;
    bool help = false;

    ProblemSpec problem;
    BackendChoice backend = BackendChoice::automatic;
    int threads = 0; // CPU backend; 0 = the library's default
    int iters = 0;   // 0 = a default that suits the backend (see resolve_defaults)
    int warmup = -1; // -1 = likewise
    bool backward = false;
    bool deterministic = false;
    CheckMode check = CheckMode::automatic;
    bool json = false;

    // bench only: the grid (every combination) and where to write it.
    std::vector<int> seqlens{512, 1024, 2048, 4096};
    std::vector<int> head_dims{64, 128};
    std::vector<bool> causal_modes{false, true};
    bool bench_forward = true, bench_backward = true;
    std::string out_prefix = "flashattn-bench";
};

// Throws UsageError naming the flag for anything malformed.
Options parse_options(int argc, const char* const* argv);

// Iteration counts that suit the backend that will run: a CPU pass can take seconds.
void resolve_defaults(Options& options, fa_backend backend);

std::string help_text(Options::Mode mode);

const char* dtype_flag_name(fa_dtype dtype); // "fp16", "bf16", "fp32"

} // namespace flashattn::cli
