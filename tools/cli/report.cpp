#include "report.h"

#include "json.h"

#include <flashattn/flashattn.h>

#include <cstdio>
#include <sstream>

namespace flashattn::cli {
namespace {

std::string format(const char* pattern, double value) {
    char text[64];
    std::snprintf(text, sizeof text, pattern, value);
    return text;
}

// "12, 0, 305, ... (total 1200)": sequence lengths from prefix sums, the first few of them.
std::string lengths_summary(const std::vector<int32_t>& cu) {
    constexpr size_t kShown = 12;
    std::ostringstream out;
    for (size_t b = 0; b + 1 < cu.size() && b < kShown; ++b) out << (b ? "," : "") << cu[b + 1] - cu[b];
    if (cu.size() - 1 > kShown) out << ",...";
    out << " (total " << cu.back() << ")";
    return out.str();
}

void print_timing(std::ostream& out, const char* pass, const Timing& timing, double flops, const std::string& formula) {
    char line[256];
    std::snprintf(line, sizeof line, "%-9s %10.3f ms median of %zu (min %.3f)  %9.4g TFLOP/s  [%s]\n", pass,
                  timing.median_ms(), timing.ms.size(), timing.min_ms(), tflops_per_s(flops, timing.median_ms()),
                  formula.c_str());
    out << line;
}

std::string check_state(const RunReport& r) {
    if (r.check) return r.check->pass ? "pass" : "fail";
    return r.check_required ? "error" : "skipped";
}

} // namespace

std::string describe_problem(const ProblemSpec& s) {
    std::ostringstream out;
    out << dtype_flag_name(s.dtype) << " b=" << s.batch << " sq=" << s.seqlen_q << " sk=" << s.seqlen_k
        << " h=" << s.heads << "/" << s.kv_heads << " d=" << s.head_dim;
    if (s.head_dim_v > 0 && s.head_dim_v != s.head_dim) out << "/" << s.head_dim_v;
    if (s.varlen) out << " varlen";
    if (s.causal) out << " causal";
    return out.str() + describe_variants(s);
}

std::string describe_variants(const ProblemSpec& s) {
    std::ostringstream out;
    if (s.window_left >= 0 || s.window_right >= 0) out << " window=" << s.window_left << "," << s.window_right;
    if (s.softcap > 0) out << " softcap=" << s.softcap;
    if (s.alibi) out << " alibi";
    if (s.dropout > 0) out << " dropout=" << s.dropout;
    if (s.learnable_sink) out << " learnable_sink";
    return out.str();
}

bool run_failed(const RunReport& r) {
    if (r.check && !r.check->pass) return true;
    if (!r.check && r.check_required) return true;
    return r.run.reproducibility_checked && !r.run.reproducible;
}

void print_report(std::ostream& out, const RunReport& r) {
    const ProblemSpec& s = r.work.spec;
    out << "flashattn " << fa_version_string() << "  backend: " << r.device << "\n";
    out << "problem   " << describe_problem(s) << "  scale=" << r.scale << "  seed=" << s.seed << "\n";
    if (s.varlen) {
        out << "          seqlens q: " << lengths_summary(r.work.cu_seqlens_q) << "\n";
        out << "          seqlens k: " << lengths_summary(r.work.cu_seqlens_k) << "\n";
    }
    if (r.flops.pairs > 0) out << "          allowed (i, j) pairs over all heads: " << format("%.0f", r.flops.pairs) << "\n";
    print_timing(out, "forward", r.run.forward, r.flops.forward, r.flops.forward_formula);
    if (r.run.backward.ran()) print_timing(out, "backward", r.run.backward, r.flops.backward, r.flops.backward_formula);
    if (r.run.reproducibility_checked)
        out << "determinism  dq, dk, dv" << (s.learnable_sink ? ", dsink" : "") << " bitwise identical on a repeat run: " << (r.run.reproducible ? "yes" : "NO")
            << "\n";

    if (r.check) {
        out << "check     against the fp64 reference (" << format("%.1f", r.check->seconds)
            << " s); bound = 2x (out, lse) or 3x (dq, dk, dv) the naive " << dtype_flag_name(s.dtype)
            << " error + 1e-5" << (s.learnable_sink && r.run.backward.ran() ? " (dsink: 3x + a floor on its terms' sum)" : "")
            << "\n";
        out << (r.run.reproducibility_checked && s.learnable_sink ? "" : "");
        for (const TensorCheck& t : r.check->tensors) {
            char line[200];
            std::snprintf(line, sizeof line, "  %-5s   max|ours - fp64| %.3e   naive %s %.3e   bound %.3e   %s\n",
                          t.name.c_str(), t.error, dtype_flag_name(s.dtype), t.naive_error, t.bound,
                          t.pass ? "PASS" : "FAIL");
            out << line;
        }
    } else {
        out << "check     " << r.check_note << "\n";
    }
    const bool failed = run_failed(r);
    out << "result    " << (failed ? "FAIL" : r.check ? "PASS" : "PASS (not checked)") << "\n";
}

std::string json_line(const RunReport& r) {
    const ProblemSpec& s = r.work.spec;
    JsonObject json;
    json.string("tool", "flashattn-cli").string("version", fa_version_string()).string("device", r.device);
    json.string("dtype", dtype_flag_name(s.dtype)).integer("batch", s.batch).integer("seqlen_q", s.seqlen_q);
    json.integer("seqlen_k", s.seqlen_k).integer("heads", s.heads).integer("kv_heads", s.kv_heads);
    json.integer("head_dim", s.head_dim).integer("head_dim_v", value_head_dim(s)).boolean("learnable_sink", s.learnable_sink);
    json.boolean("causal", s.causal).integer("window_left", s.window_left);
    json.integer("window_right", s.window_right).number("softcap", s.softcap).boolean("alibi", s.alibi);
    json.number("dropout", s.dropout).number("scale", r.scale).boolean("varlen", s.varlen);
    json.integer("seed", int64_t(s.seed)).integer("warmup", r.options.warmup).integer("iters", r.options.iters);
    if (s.varlen) json.integer("total_q", r.work.q_rows).integer("total_k", r.work.k_rows);
    json.number("fwd_ms", r.run.forward.median_ms()).number("fwd_min_ms", r.run.forward.min_ms());
    json.number("fwd_tflops", tflops_per_s(r.flops.forward, r.run.forward.median_ms()));
    json.number("fwd_flops", r.flops.forward).string("fwd_flops_formula", r.flops.forward_formula);
    if (r.run.backward.ran()) {
        json.number("bwd_ms", r.run.backward.median_ms()).number("bwd_min_ms", r.run.backward.min_ms());
        json.number("bwd_tflops", tflops_per_s(r.flops.backward, r.run.backward.median_ms()));
        json.number("bwd_flops", r.flops.backward).string("bwd_flops_formula", r.flops.backward_formula);
        json.boolean("deterministic", r.options.deterministic);
    }
    if (r.run.reproducibility_checked) json.boolean("reproducible", r.run.reproducible);
    json.string("check", check_state(r));
    if (r.check) {
        JsonObject errors;
        for (const TensorCheck& t : r.check->tensors) {
            JsonObject one;
            one.number("error", t.error).number("naive_error", t.naive_error).number("bound", t.bound);
            one.boolean("pass", t.pass);
            errors.raw(t.name, one.str());
        }
        json.raw("errors", errors.str());
    } else {
        json.string("check_note", r.check_note);
    }
    json.string("result", run_failed(r) ? "fail" : "pass");
    return json.str();
}

} // namespace flashattn::cli
