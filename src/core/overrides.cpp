#include "overrides.h"

#include "error.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>

namespace flashattn {
namespace {

KernelChoice kernel_choice(const std::string& key, const std::string& value) {
    if (value == "sm80") return KernelChoice::sm80;
    if (value == "sm90") return KernelChoice::sm90;
    if (value == "auto") return KernelChoice::automatic;
    fail(FA_ERROR_INVALID_ARGUMENT, "overrides: ", key, " must be sm80, sm90 or auto, got '", value, "'");
}

InferenceChoice inference_choice(const std::string& value) {
    if (value == "tile64") return InferenceChoice::tile64;
    if (value == "split_keys") return InferenceChoice::split_keys;
    if (value == "auto") return InferenceChoice::automatic;
    fail(FA_ERROR_INVALID_ARGUMENT, "overrides: inference_kernel must be tile64, split_keys or auto, got '", value, "'");
}

GqaBackwardChoice gqa_backward_choice(const std::string& value) {
    if (value == "kv_major") return GqaBackwardChoice::kv_major;
    if (value == "kv_pairs") return GqaBackwardChoice::kv_pairs;
    if (value == "scratch") return GqaBackwardChoice::scratch;
    if (value == "auto") return GqaBackwardChoice::automatic;
    fail(FA_ERROR_INVALID_ARGUMENT, "overrides: backward_gqa must be kv_major, kv_pairs, scratch or auto, got '", value, "'");
}

DeterministicDqChoice deterministic_dq_choice(const std::string& value) {
    if (value == "ordered") return DeterministicDqChoice::ordered;
    if (value == "chunks") return DeterministicDqChoice::chunks;
    if (value == "auto") return DeterministicDqChoice::automatic;
    fail(FA_ERROR_INVALID_ARGUMENT, "overrides: deterministic_dq must be ordered, chunks or auto, got '", value, "'");
}

struct State {
    std::mutex mutex;
    Overrides value;
    std::string error; // a malformed FLASHATTN_OVERRIDES: every call reports it until replaced
    State() {
        if (const char* spec = std::getenv("FLASHATTN_OVERRIDES")) {
            try {
                value = parse_overrides(spec);
            } catch (const Error& e) {
                error = e.what();
            }
        }
    }
};

State& state() {
    static State s;
    return s;
}

} // namespace

Overrides parse_overrides(const std::string& spec) {
    Overrides o;
    std::stringstream items(spec);
    std::string item;
    while (std::getline(items, item, ',')) {
        if (item.empty()) continue;
        const size_t eq = item.find('=');
        require(eq != std::string::npos, "overrides: '", item, "' must be key=value");
        const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
        if (key == "forward_kernel") {
            o.forward_kernel = kernel_choice(key, value);
        } else if (key == "backward_kernel") {
            o.backward_kernel = kernel_choice(key, value);
        } else if (key == "inference_kernel") {
            o.inference_kernel = inference_choice(value);
        } else if (key == "backward_gqa") {
            o.backward_gqa = gqa_backward_choice(value);
        } else if (key == "deterministic_dq") {
            o.deterministic_dq = deterministic_dq_choice(value);
        } else if (key == "cpu_isa") {
            require(value == "generic" || value == "avx2" || value == "avx512",
                    "overrides: cpu_isa must be generic, avx2 or avx512, got '", value, "'");
            o.cpu_isa = value;
        } else if (key == "cpu_blocks") {
            int fq = 0, fk = 0, bq = 0, bk = 0;
            char tail = 0;
            require(std::sscanf(value.c_str(), "%dx%dx%dx%d%c", &fq, &fk, &bq, &bk, &tail) == 4 && fq >= 0 && fk >= 0 &&
                        bq >= 0 && bk >= 0,
                    "overrides: cpu_blocks must be FQxFKxBQxBK (forward and backward tiles, 0 = the backend's), got '",
                    value, "'");
            o.cpu_fwd_block_q = fq, o.cpu_fwd_block_k = fk, o.cpu_bwd_block_q = bq, o.cpu_bwd_block_k = bk;
        } else {
            fail(FA_ERROR_INVALID_ARGUMENT, "overrides: unknown key '", key,
                 "' (known: forward_kernel, backward_kernel, inference_kernel, backward_gqa, deterministic_dq, cpu_isa, "
                 "cpu_blocks)");
        }
    }
    return o;
}

Overrides current_overrides() {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    require(s.error.empty(), "FLASHATTN_OVERRIDES: ", s.error, " (fix or unset it, or call fa_set_overrides)");
    return s.value;
}

void set_overrides(const char* spec) {
    const Overrides parsed = parse_overrides(spec ? spec : "");
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.value = parsed;
    s.error.clear();
}

int num_threads_from_environment() {
    const char* env = std::getenv("FLASHATTN_NUM_THREADS");
    if (!env) return 0;
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || n <= 0) return 0;
    return n > 1024 ? 1024 : int(n);
}

} // namespace flashattn
