// The flag table: each flag's name, scope, help and how it sets Options, so parsing and --help
// cannot disagree. Values are checked here, with the flag's name in every message; the library
// re-validates the resulting parameters anyway.
#include "options.h"

#include "errors.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>

namespace flashattn::cli {
namespace {

enum class Scope { run, bench, both };

struct Flag {
    const char* name;
    const char* value_name; // nullptr: a switch without a value
    Scope scope;
    const char* help;
    std::function<void(Options&, const std::string& value)> apply;
};

[[noreturn]] void bad_value(const std::string& flag, const std::string& expected, const std::string& value) {
    throw UsageError(flag + " expects " + expected + ", got '" + value + "'");
}

// `whole` is the flag's full value when `value` is one element of a list, for the message.
int64_t parse_integer(const std::string& flag, const std::string& value, int64_t min, int64_t max,
                      const std::string& expected, const std::string& whole = "") {
    const std::string shown = whole.empty() ? value : whole;
    if (value.empty()) bad_value(flag, expected, shown);
    char* end = nullptr;
    errno = 0;
    const long long parsed = std::strtoll(value.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE || parsed < min || parsed > max) bad_value(flag, expected, shown);
    return parsed;
}

int parse_int(const std::string& flag, const std::string& value, int min, int max = std::numeric_limits<int>::max()) {
    std::ostringstream expected;
    expected << "an integer";
    if (max == std::numeric_limits<int>::max()) expected << " >= " << min;
    else expected << " in [" << min << ", " << max << "]";
    return static_cast<int>(parse_integer(flag, value, min, max, expected.str()));
}

float parse_float(const std::string& flag, const std::string& value, const std::string& expected,
                  const std::function<bool(float)>& acceptable) {
    if (value.empty()) bad_value(flag, expected, value);
    char* end = nullptr;
    errno = 0;
    const float parsed = std::strtof(value.c_str(), &end);
    if (*end != '\0' || errno == ERANGE || !std::isfinite(parsed) || !acceptable(parsed))
        bad_value(flag, expected, value);
    return parsed;
}

uint64_t parse_u64(const std::string& flag, const std::string& value) {
    const std::string expected = "an integer in [0, 2^64)";
    if (value.empty() || value[0] == '-') bad_value(flag, expected, value);
    char* end = nullptr;
    errno = 0;
    const unsigned long long parsed = std::strtoull(value.c_str(), &end, 10);
    if (*end != '\0' || errno == ERANGE) bad_value(flag, expected, value);
    return parsed;
}

std::vector<std::string> split_commas(const std::string& value) {
    std::vector<std::string> parts;
    std::string part;
    std::istringstream in(value);
    while (std::getline(in, part, ',')) parts.push_back(part);
    if (!value.empty() && value.back() == ',') parts.emplace_back();
    return parts;
}

std::vector<int> parse_int_list(const std::string& flag, const std::string& value, int min, int max) {
    const std::string expected = "a comma-separated list of integers in [" + std::to_string(min) + ", " +
                                 std::to_string(max) + "]";
    std::vector<int> list;
    for (const std::string& part : split_commas(value))
        list.push_back(static_cast<int>(parse_integer(flag, part, min, max, expected, value)));
    if (list.empty()) bad_value(flag, expected, value);
    return list;
}

fa_dtype parse_dtype(const std::string& flag, const std::string& value) {
    if (value == "fp16" || value == "float16" || value == "half") return FA_FLOAT16;
    if (value == "bf16" || value == "bfloat16") return FA_BFLOAT16;
    if (value == "fp32" || value == "float32" || value == "float") return FA_FLOAT32;
    bad_value(flag, "fp16, bf16 or fp32", value);
}

std::vector<Flag> flag_table() {
    return {
        // Problem shape.
        {"--batch", "N", Scope::both, "sequences in the batch (default 2; bench 1)",
         [](Options& o, const std::string& v) { o.problem.batch = parse_int("--batch", v, 1); }},
        {"--seqlen", "N", Scope::run, "query and key length (default 512)",
         [](Options& o, const std::string& v) { o.problem.seqlen_q = o.problem.seqlen_k = parse_int("--seqlen", v, 0); }},
        {"--seqlen-q", "N", Scope::run, "query length (overrides --seqlen; varlen: the maximum)",
         [](Options& o, const std::string& v) { o.problem.seqlen_q = parse_int("--seqlen-q", v, 0); }},
        {"--seqlen-k", "N", Scope::run, "key/value length (overrides --seqlen; varlen: the maximum)",
         [](Options& o, const std::string& v) { o.problem.seqlen_k = parse_int("--seqlen-k", v, 0); }},
        {"--heads", "N", Scope::both, "query heads (default 8; bench 16)",
         [](Options& o, const std::string& v) { o.problem.heads = parse_int("--heads", v, 1); }},
        {"--kv-heads", "N", Scope::both, "key/value heads, dividing --heads: MQA/GQA (default: --heads)",
         [](Options& o, const std::string& v) { o.problem.kv_heads = parse_int("--kv-heads", v, 1); }},
        {"--head-dim", "D", Scope::run, "head dimension, 1..256 (default 64)",
         [](Options& o, const std::string& v) { o.problem.head_dim = parse_int("--head-dim", v, 1, 256); }},
        {"--head-dim-v", "D", Scope::run, "head dimension of v and out, 1..256, when unlike --head-dim's (e.g. 192/128, DeepSeek's MLA)",
         [](Options& o, const std::string& v) { o.problem.head_dim_v = parse_int("--head-dim-v", v, 1, 256); }},
        {"--dtype", "T", Scope::both, "fp16, bf16 or fp32 (fp32: CPU backend only; default bf16)",
         [](Options& o, const std::string& v) { o.problem.dtype = parse_dtype("--dtype", v); }},
        {"--varlen", nullptr, Scope::run, "packed batch of random lengths up to the seqlens, some empty",
         [](Options& o, const std::string&) { o.problem.varlen = true; }},
        // Inference (KV cache).
        {"--kvcache", nullptr, Scope::run,
         "a decode step on a KV cache: --seqlen-k rows cached per sequence, --seqlen-q new tokens (default 1) appended and attending (fa_kvcache_forward)",
         [](Options& o, const std::string&) { o.problem.kvcache = true; }},
        {"--paged", nullptr, Scope::run, "with --kvcache: the cache is a pool of pages reached through a block table",
         [](Options& o, const std::string&) { o.problem.paged = true; }},
        {"--page-size", "N", Scope::run, "rows per page, a multiple of 16 (default 16; implies --paged)",
         [](Options& o, const std::string& v) {
             const int n = parse_int("--page-size", v, 16);
             if (n % 16 != 0) bad_value("--page-size", "a positive multiple of 16", v);
             o.problem.page_size = n;
             o.problem.paged = true;
         }},
        {"--rotary-dim", "N", Scope::run, "with --kvcache: rotary embedding of q and the new keys on the first N features (even; GPT-NeoX layout)",
         [](Options& o, const std::string& v) {
             const int n = parse_int("--rotary-dim", v, 0, 256);
             if (n % 2 != 0) bad_value("--rotary-dim", "an even integer in [0, 256]", v);
             o.problem.rotary_dim = n;
         }},
        {"--rotary-interleaved", nullptr, Scope::run, "rotary pairs (2t, 2t+1) (GPT-J) instead of (t, t + N/2)",
         [](Options& o, const std::string&) { o.problem.rotary_interleaved = true; }},
        {"--num-splits", "N", Scope::run, "split-KV: 1 = off, 0 = the backend's heuristic (default 1; --kvcache: 0)",
         [](Options& o, const std::string& v) { o.problem.num_splits = parse_int("--num-splits", v, 0); }},
        // Attention variants.
        {"--causal", nullptr, Scope::run, "causal mask, aligned to the bottom-right corner",
         [](Options& o, const std::string&) { o.problem.causal = true; }},
        {"--window", "L,R", Scope::both, "local attention: keys within L left and R right of the diagonal (-1 = unbounded)",
         [](Options& o, const std::string& v) {
             const std::string expected = "L,R with integers >= -1 (-1 = unbounded), e.g. 128,0";
             const std::vector<std::string> parts = split_commas(v);
             if (parts.size() != 2) bad_value("--window", expected, v);
             const int64_t max = std::numeric_limits<int>::max();
             o.problem.window_left = static_cast<int>(parse_integer("--window", parts[0], -1, max, expected, v));
             o.problem.window_right = static_cast<int>(parse_integer("--window", parts[1], -1, max, expected, v));
         }},
        {"--softcap", "X", Scope::both, "scores = X * tanh(scores / X); 0 = off",
         [](Options& o, const std::string& v) {
             o.problem.softcap = parse_float("--softcap", v, "a finite number >= 0 (0 = off)", [](float x) { return x >= 0; });
         }},
        {"--alibi", nullptr, Scope::both, "ALiBi with the usual geometric slopes 2^(-8(h+1)/heads)",
         [](Options& o, const std::string&) { o.problem.alibi = true; }},
        {"--learnable-sink", nullptr, Scope::run,
         "learnable attention sinks: one random fp32 logit per query head (normal, from --seed) in every row's softmax denominator, with no value; --backward checks dsink too",
         [](Options& o, const std::string&) { o.problem.learnable_sink = true; }},
        {"--dropout", "P", Scope::both, "dropout probability in [0, 1)",
         [](Options& o, const std::string& v) {
             o.problem.dropout = parse_float("--dropout", v, "a probability in [0, 1)", [](float x) { return x >= 0 && x < 1; });
         }},
        {"--scale", "X", Scope::both, "softmax scale (default 1/sqrt(head_dim))",
         [](Options& o, const std::string& v) {
             o.problem.scale = parse_float("--scale", v, "a finite number > 0", [](float x) { return x > 0; });
         }},
        {"--seed", "N", Scope::both, "seed of the input data, varlen lengths and dropout (default 0)",
         [](Options& o, const std::string& v) { o.problem.seed = parse_u64("--seed", v); }},
        // Execution.
        {"--backend", "B", Scope::both, "auto (CUDA if available, else CPU), cpu or cuda",
         [](Options& o, const std::string& v) {
             if (v == "auto") o.backend = BackendChoice::automatic;
             else if (v == "cpu") o.backend = BackendChoice::cpu;
             else if (v == "cuda" || v == "gpu") o.backend = BackendChoice::cuda;
             else bad_value("--backend", "auto, cpu or cuda", v);
         }},
        {"--backward", nullptr, Scope::run, "also run and time the backward pass",
         [](Options& o, const std::string&) { o.backward = true; }},
        {"--deterministic", nullptr, Scope::both, "deterministic backward; the run also verifies it bit for bit",
         [](Options& o, const std::string&) { o.deterministic = true; }},
        {"--threads", "N", Scope::both, "CPU backend threads (default: FLASHATTN_NUM_THREADS, else all cores)",
         [](Options& o, const std::string& v) { o.threads = parse_int("--threads", v, 1); }},
        {"--iters", "N", Scope::both, "timed iterations (default: cpu 5, cuda 20; bench cpu 3)",
         [](Options& o, const std::string& v) { o.iters = parse_int("--iters", v, 1); }},
        {"--warmup", "N", Scope::both, "untimed iterations first (default: cpu 1, cuda 5)",
         [](Options& o, const std::string& v) { o.warmup = parse_int("--warmup", v, 0); }},
        {"--check", nullptr, Scope::both,
         "compare with the fp64 reference (default: on when the problem is small enough for it to be quick; bench: off, and --check checks the points small enough)",
         [](Options& o, const std::string&) { o.check = CheckMode::on; }},
        {"--no-check", nullptr, Scope::both, "skip the reference check",
         [](Options& o, const std::string&) { o.check = CheckMode::off; }},
        {"--json", nullptr, Scope::run, "print one machine-readable JSON line instead of the report",
         [](Options& o, const std::string&) { o.json = true; }},
        // Bench grid.
        {"--seqlens", "LIST", Scope::bench, "sequence lengths (default 512,1024,2048,4096)",
         [](Options& o, const std::string& v) { o.seqlens = parse_int_list("--seqlens", v, 1, std::numeric_limits<int>::max()); }},
        {"--head-dims", "LIST", Scope::bench, "head dimensions (default 64,128)",
         [](Options& o, const std::string& v) { o.head_dims = parse_int_list("--head-dims", v, 1, 256); }},
        {"--causal-modes", "LIST", Scope::bench, "off, on or off,on (default off,on)",
         [](Options& o, const std::string& v) {
             o.causal_modes.clear();
             for (const std::string& part : split_commas(v)) {
                 if (part == "off" || part == "0" || part == "no") o.causal_modes.push_back(false);
                 else if (part == "on" || part == "1" || part == "yes") o.causal_modes.push_back(true);
                 else bad_value("--causal-modes", "a list of off/on, e.g. off,on", v);
             }
             if (o.causal_modes.empty()) bad_value("--causal-modes", "a list of off/on, e.g. off,on", v);
         }},
        {"--passes", "LIST", Scope::bench, "fwd, bwd or fwd,bwd (default fwd,bwd)",
         [](Options& o, const std::string& v) {
             o.bench_forward = o.bench_backward = false;
             for (const std::string& part : split_commas(v)) {
                 if (part == "fwd") o.bench_forward = true;
                 else if (part == "bwd") o.bench_backward = true;
                 else bad_value("--passes", "a list of fwd/bwd, e.g. fwd,bwd", v);
             }
             if (!o.bench_forward && !o.bench_backward) bad_value("--passes", "a list of fwd/bwd, e.g. fwd,bwd", v);
         }},
        {"--out", "PREFIX", Scope::bench, "write PREFIX.csv and PREFIX.json (default flashattn-bench)",
         [](Options& o, const std::string& v) {
             if (v.empty()) bad_value("--out", "a file name prefix", v);
             o.out_prefix = v;
         }},
        {"--help", nullptr, Scope::both, "this text",
         [](Options& o, const std::string&) { o.help = true; }},
    };
}

// The bench spells the run flags that become grid axes as lists.
std::string bench_equivalent(const std::string& run_flag) {
    if (run_flag == "--causal") return "; use --causal-modes on";
    if (run_flag == "--head-dim") return "; use --head-dims";
    if (run_flag == "--seqlen" || run_flag == "--seqlen-q" || run_flag == "--seqlen-k") return "; use --seqlens";
    if (run_flag == "--backward") return "; use --passes bwd";
    return "";
}

bool in_scope(Scope scope, Options::Mode mode) {
    return scope == Scope::both || (scope == Scope::run) == (mode == Options::Mode::run);
}

// Cross-flag rules, checked once every flag is known.
void check_combination(const Options& o) {
    const ProblemSpec& p = o.problem;
    if (p.heads % p.kv_heads != 0)
        throw UsageError("--kv-heads (" + std::to_string(p.kv_heads) + ") must divide --heads (" +
                         std::to_string(p.heads) + ")");
    if (!p.kvcache) {
        if (p.paged) throw UsageError("--paged/--page-size need --kvcache");
        if (p.rotary_dim) throw UsageError("--rotary-dim needs --kvcache");
        return;
    }
    if (o.backward) throw UsageError("--kvcache is forward only (inference); drop --backward");
    if (p.varlen) throw UsageError("--kvcache and --varlen do not combine (cache lengths are per sequence already)");
    if (p.dropout > 0) throw UsageError("--kvcache does not take --dropout (inference)");
    if (p.rotary_dim > p.head_dim)
        throw UsageError("--rotary-dim (" + std::to_string(p.rotary_dim) + ") must be <= --head-dim (" +
                         std::to_string(p.head_dim) + ")");
}

// Word-wraps `text` to `width` columns, continuation lines indented by `indent`.
std::string wrap(const std::string& text, size_t indent, size_t width) {
    std::istringstream words(text);
    std::string word, out;
    size_t column = indent;
    while (words >> word) {
        if (column > indent && column + 1 + word.size() > width) {
            out += "\n" + std::string(indent, ' ');
            column = indent;
        } else if (column > indent) {
            out += ' ';
            ++column;
        }
        out += word;
        column += word.size();
    }
    return out;
}

} // namespace

Options parse_options(int argc, const char* const* argv) {
    Options options;
    int first = 1;
    if (argc > 1 && std::string(argv[1]) == "bench") {
        options.mode = Options::Mode::bench;
        options.problem.batch = 1;
        options.problem.heads = options.problem.kv_heads = 16;
        first = 2;
    }
    const std::vector<Flag> flags = flag_table();
    bool kv_heads_given = false, seqlen_q_given = false, num_splits_given = false;
    for (int i = first; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg == "-h") arg = "--help";
        std::optional<std::string> value;
        if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
            value = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
        }
        const Flag* flag = nullptr;
        for (const Flag& f : flags)
            if (arg == f.name) flag = &f;
        if (!flag) {
            if (arg == "bench") throw UsageError("'bench' must come first: flashattn-cli bench [flags]");
            throw UsageError("unknown " + std::string(arg.rfind("-", 0) == 0 ? "flag " : "argument ") + arg +
                             " (see flashattn-cli" + (options.mode == Options::Mode::bench ? " bench" : "") + " --help)");
        }
        if (!in_scope(flag->scope, options.mode))
            throw UsageError(options.mode == Options::Mode::bench
                                 ? arg + " is not a bench flag" + bench_equivalent(arg) + " (see flashattn-cli bench --help)"
                                 : arg + " is a bench flag: flashattn-cli bench " + arg + " ...");
        if (flag->value_name && !value) {
            if (i + 1 >= argc) throw UsageError(arg + " needs a value: " + arg + " " + flag->value_name);
            value = argv[++i];
        } else if (!flag->value_name && value) {
            throw UsageError(arg + " takes no value, got '" + *value + "'");
        }
        flag->apply(options, value.value_or(""));
        if (arg == "--heads" && !kv_heads_given) options.problem.kv_heads = options.problem.heads;
        if (arg == "--kv-heads") kv_heads_given = true;
        if (arg == "--seqlen" || arg == "--seqlen-q") seqlen_q_given = true;
        if (arg == "--num-splits") num_splits_given = true;
    }
    if (options.problem.kvcache) { // a decode step by default: one new token, the backend's split-KV
        if (!seqlen_q_given) options.problem.seqlen_q = 1;
        if (!num_splits_given) options.problem.num_splits = 0;
    }
    if (!options.help) check_combination(options);
    return options;
}

void resolve_defaults(Options& options, fa_backend backend) {
    const bool cpu = backend == FA_BACKEND_CPU;
    const bool bench = options.mode == Options::Mode::bench;
    if (options.iters == 0) options.iters = cpu ? (bench ? 3 : 5) : 20;
    if (options.warmup < 0) options.warmup = cpu ? 1 : 5;
}

std::string help_text(Options::Mode mode) {
    std::ostringstream out;
    if (mode == Options::Mode::run) {
        out << "flashattn-cli: run FlashAttention-2 on one problem, check it against the fp64 reference, time it.\n\n"
               "usage: flashattn-cli [flags]\n"
               "       flashattn-cli bench [flags]    (a grid of problems; see flashattn-cli bench --help)\n\n"
               "examples:\n"
               "  flashattn-cli --seqlen 1024 --heads 16 --head-dim 128 --causal\n"
               "  flashattn-cli --dtype fp16 --batch 4 --seqlen-q 1 --seqlen-k 4096 --heads 32 --kv-heads 8\n"
               "  flashattn-cli --varlen --backward --dropout 0.1 --window 64,0 --json\n"
               "  flashattn-cli --head-dim 192 --head-dim-v 128 --learnable-sink --causal --backward --check\n"
               "  flashattn-cli --kvcache --paged --page-size 16 --batch 8 --seqlen-k 4096 --heads 32 --kv-heads 8 --head-dim 128\n\n";
    } else {
        out << "flashattn-cli bench: time a grid of problems (every combination of the lists), print a table and\n"
               "write PREFIX.csv and PREFIX.json.\n\n"
               "usage: flashattn-cli bench [flags]\n\n"
               "example:\n"
               "  flashattn-cli bench --seqlens 512,1024 --head-dims 64,128 --causal-modes on --out results/h200\n\n";
    }
    out << "flags:\n";
    for (const Flag& f : flag_table()) {
        if (!in_scope(f.scope, mode)) continue;
        std::string left = std::string("  ") + f.name + (f.value_name ? std::string(" ") + f.value_name : "");
        if (left.size() < 22) left.resize(22, ' ');
        else left += "\n" + std::string(22, ' ');
        out << left << wrap(f.help, 22, 100) << "\n";
    }
    out << "\nexit status: 0 success, 1 a failed check or run, 2 a usage error (bad flag, or a request this\n"
           "build or backend cannot serve). Progress goes to stderr; results to stdout.\n";
    if (mode == Options::Mode::run)
        out << "\nTFLOP/s: FlashAttention-2's formula, forward 4*b*h*sq*sk*d (halved when causal), backward 2.5x\n"
               "forward; with a window or varlen, the allowed (i, j) pairs counted exactly: 4*d*pairs forward,\n"
               "10*d*pairs backward. Each timing line says which formula it used.\n";
    return out.str();
}

const char* dtype_flag_name(fa_dtype dtype) {
    switch (dtype) {
        case FA_FLOAT16: return "fp16";
        case FA_BFLOAT16: return "bf16";
        case FA_FLOAT32: return "fp32";
    }
    return "?";
}

} // namespace flashattn::cli
