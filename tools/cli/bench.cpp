#include "bench.h"

#include "checker.h"
#include "errors.h"
#include "flops.h"
#include "json.h"
#include "report.h"
#include "runner.h"
#include "workload.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

namespace flashattn::cli {
namespace {

struct BenchRow {
    std::string pass; // fwd or bwd
    ProblemSpec spec;
    Timing timing;
    double flops = 0;
    std::string formula;
    std::string check = "-"; // pass, fail, skipped, -
    std::string error;       // the library's message when the point could not run
};

// The folder of --out is made if missing, so `--out results/grid` works from any directory.
std::ofstream open_output(const std::string& path) {
    std::error_code ignored; // an unusable folder shows up as the open failing below
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ignored);
    std::ofstream file(path);
    if (!file) throw UsageError("--out: cannot write " + path);
    return file;
}

void print_table_header() {
    std::printf("%-4s %-6s %5s %7s %6s %9s %12s %10s  %s\n", "pass", "causal", "hdim", "seqlen", "batch", "heads",
                "ms (median)", "TFLOP/s", "check");
    std::fflush(stdout);
}

void print_table_row(const BenchRow& row) {
    const ProblemSpec& s = row.spec;
    char heads[32];
    std::snprintf(heads, sizeof heads, "%d/%d", s.heads, s.kv_heads);
    if (!row.error.empty()) {
        std::printf("%-4s %-6s %5d %7d %6d %9s  error: %s\n", row.pass.c_str(), s.causal ? "yes" : "no", s.head_dim,
                    s.seqlen_q, s.batch, heads, row.error.c_str());
    } else {
        std::printf("%-4s %-6s %5d %7d %6d %9s %12.3f %10.4g  %s\n", row.pass.c_str(), s.causal ? "yes" : "no",
                    s.head_dim, s.seqlen_q, s.batch, heads, row.timing.median_ms(),
                    tflops_per_s(row.flops, row.timing.median_ms()), row.check.c_str());
    }
    std::fflush(stdout);
}

std::string csv_field(const std::string& text) {
    if (text.find_first_of(",\"\n") == std::string::npos) return text;
    std::string quoted = "\"";
    for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
}

void write_csv(std::ofstream& file, const std::vector<BenchRow>& rows, const std::string& device) {
    file << "device,dtype,pass,causal,head_dim,seqlen_q,seqlen_k,batch,heads,kv_heads,iters,median_ms,min_ms,"
            "flops,tflops,flops_formula,check,error\n";
    for (const BenchRow& r : rows) {
        const ProblemSpec& s = r.spec;
        file << csv_field(device) << "," << dtype_flag_name(s.dtype) << "," << r.pass << "," << (s.causal ? 1 : 0)
             << "," << s.head_dim << "," << s.seqlen_q << "," << s.seqlen_k << "," << s.batch << "," << s.heads << ","
             << s.kv_heads << "," << r.timing.ms.size() << "," << r.timing.median_ms() << "," << r.timing.min_ms()
             << "," << r.flops << "," << tflops_per_s(r.flops, r.timing.median_ms()) << "," << csv_field(r.formula)
             << "," << r.check << "," << csv_field(r.error) << "\n";
    }
}

void write_json(std::ofstream& file, const std::vector<BenchRow>& rows, const Options& options,
                const std::string& device) {
    JsonObject meta;
    meta.string("tool", "flashattn-cli bench").string("version", fa_version_string()).string("device", device);
    meta.string("dtype", dtype_flag_name(options.problem.dtype)).integer("warmup", options.warmup);
    meta.integer("iters", options.iters).string("variants", describe_variants(options.problem));
    std::string list;
    for (const BenchRow& r : rows) {
        const ProblemSpec& s = r.spec;
        JsonObject row;
        row.string("pass", r.pass).boolean("causal", s.causal).integer("head_dim", s.head_dim);
        row.integer("seqlen_q", s.seqlen_q).integer("seqlen_k", s.seqlen_k).integer("batch", s.batch);
        row.integer("heads", s.heads).integer("kv_heads", s.kv_heads);
        if (r.error.empty()) {
            row.number("median_ms", r.timing.median_ms()).number("min_ms", r.timing.min_ms());
            row.number("flops", r.flops).number("tflops", tflops_per_s(r.flops, r.timing.median_ms()));
            row.string("flops_formula", r.formula).string("check", r.check);
        } else {
            row.string("error", r.error);
        }
        list += (list.empty() ? "" : ",\n  ") + row.str();
    }
    file << "{\"meta\": " << meta.str() << ",\n \"rows\": [\n  " << list << "\n]}\n";
}

// Whether the checked tensors of one pass (out/lse, or dq/dk/dv) all passed.
std::string pass_check(const CheckResult& check, const std::set<std::string>& names) {
    for (const TensorCheck& t : check.tensors)
        if (names.count(t.name) && !t.pass) return "fail";
    return "pass";
}

} // namespace

int run_bench(const Options& options, Device& device, Progress& progress) {
    std::ofstream csv = open_output(options.out_prefix + ".csv");
    std::ofstream json = open_output(options.out_prefix + ".json");
    const std::string device_name = device.description();
    const ProblemSpec& fixed = options.problem;
    std::printf("flashattn %s bench  backend: %s  %s%s, warmup %d, iters %d\n", fa_version_string(),
                device_name.c_str(), dtype_flag_name(fixed.dtype), describe_variants(fixed).c_str(), options.warmup,
                options.iters);
    print_table_header();

    const size_t points = options.head_dims.size() * options.seqlens.size() * options.causal_modes.size();
    size_t point = 0;
    bool any_failed = false;
    std::vector<BenchRow> rows;
    for (const int head_dim : options.head_dims) {
        for (const int seqlen : options.seqlens) {
            for (const bool causal : options.causal_modes) {
                ProblemSpec spec = options.problem;
                spec.head_dim = head_dim;
                spec.seqlen_q = spec.seqlen_k = seqlen;
                spec.causal = causal;
                char label[96];
                std::snprintf(label, sizeof label, "[%zu/%zu] d=%d s=%d%s ", ++point, points, head_dim, seqlen,
                              causal ? " causal" : "");

                BenchRow fwd, bwd;
                fwd.pass = "fwd";
                bwd.pass = "bwd";
                fwd.spec = bwd.spec = spec;
                try {
                    Workload work = make_workload(spec, options.bench_backward);
                    Outputs outputs = make_outputs(work, options.bench_backward);
                    const Problem problem = host_problem(work, host_bindings(work, outputs));
                    const FlopCount flops = count_flops(problem, spec);
                    fwd.flops = flops.forward;
                    fwd.formula = flops.forward_formula;
                    bwd.flops = flops.backward;
                    bwd.formula = flops.backward_formula;
                    const RunConfig config{options.warmup, options.iters, options.bench_backward,
                                           options.deterministic};
                    const RunResult result = run_attention(work, outputs, device, config, progress, label);
                    fwd.timing = result.forward;
                    bwd.timing = result.backward;
                    if (options.check == CheckMode::on) {
                        if (!reference_is_affordable(problem, options.bench_backward)) {
                            fwd.check = bwd.check = "skipped";
                        } else {
                            const CheckResult check =
                                check_against_reference(work, outputs, options.bench_backward, progress, label);
                            fwd.check = pass_check(check, {"out", "lse"});
                            bwd.check = pass_check(check, {"dq", "dk", "dv"});
                        }
                    }
                    if (result.reproducibility_checked && !result.reproducible) bwd.check = "not reproducible";
                } catch (const std::exception& e) {
                    progress.end();
                    fwd.error = bwd.error = e.what();
                }
                for (BenchRow* row : {&fwd, &bwd}) {
                    if ((row == &fwd && !options.bench_forward) || (row == &bwd && !options.bench_backward)) continue;
                    any_failed = any_failed || !row->error.empty() || row->check == "fail" ||
                                 row->check == "not reproducible";
                    print_table_row(*row);
                    rows.push_back(*row);
                }
            }
        }
    }
    write_csv(csv, rows, device_name);
    write_json(json, rows, options, device_name);
    std::printf("wrote %s.csv and %s.json\n", options.out_prefix.c_str(), options.out_prefix.c_str());
    return any_failed ? kExitFailure : kExitSuccess;
}

} // namespace flashattn::cli
