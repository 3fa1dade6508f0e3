// flashattn-cli: run FlashAttention-2 on a problem described by flags, check it against the fp64
// reference, and time it; `flashattn-cli bench` does the same over a grid. See --help.
//
//   cmake --preset dev && cmake --build --preset dev --target flashattn-cli
//   build/tools/cli/flashattn-cli --seqlen 1024 --heads 16 --head-dim 128 --causal --backward
//   build/tools/cli/flashattn-cli bench --seqlens 512,1024 --out results/cpu
//
// The pieces: options (flags), workload (host inputs and params), device (host or CUDA memory and
// timing), runner (timed library calls), checker (tolerance rule against the reference), flops,
// report (text or JSON), bench (the grid) and kvcache (a decode step, --kvcache).
#include "bench.h"
#include "checker.h"
#include "device.h"
#include "errors.h"
#include "flops.h"
#include "json.h"
#include "kvcache.h"
#include "options.h"
#include "progress.h"
#include "report.h"
#include "runner.h"
#include "workload.h"

#include <flashattn/flashattn.hpp>

#include <iostream>
#include <new>

using namespace flashattn::cli;

namespace {

std::unique_ptr<Device> open_device(const Options& options) {
    const bool use_cuda = options.backend == BackendChoice::cuda ||
                          (options.backend == BackendChoice::automatic && fa_cuda_available());
    std::unique_ptr<Device> device = use_cuda ? make_cuda_device() : make_cpu_device();
    if (use_cuda && options.problem.dtype == FA_FLOAT32)
        throw UsageError("--dtype fp32 runs on the CPU backend only; use fp16/bf16 or add --backend cpu");
    return device;
}

std::string skipped_check_note(const Options& options) {
    return options.check == CheckMode::off
               ? "skipped (--no-check)"
               : "skipped: too large for the naive reference to finish quickly (force it with --check)";
}

int run_single(const Options& options, Device& device, Progress& progress) {
    if (options.deterministic && !options.backward)
        throw UsageError("--deterministic applies to the backward pass; add --backward");
    Workload work = make_workload(options.problem, options.backward);
    Outputs outputs = make_outputs(work, options.backward);
    const flashattn::Problem problem = host_problem(work, host_bindings(work, outputs));

    RunReport report{options, work, device.description(), problem.scale, count_flops(problem, options.problem),
                     {}, std::nullopt, "", options.check == CheckMode::on};
    const RunConfig config{options.warmup, options.iters, options.backward, options.deterministic};
    report.run = run_attention(work, outputs, device, config, progress, "");

    const bool check = options.check == CheckMode::on ||
                       (options.check == CheckMode::automatic && reference_is_affordable(problem, options.backward));
    if (!check) {
        report.check_note = skipped_check_note(options);
    } else {
        try {
            report.check = check_against_reference(work, outputs, options.backward, progress);
        } catch (const std::exception& e) {
            progress.end();
            report.check_note = std::string("could not run the fp64 reference: ") + e.what();
        }
    }
    if (options.json) std::cout << json_line(report) << std::endl;
    else print_report(std::cout, report);
    return run_failed(report) ? kExitFailure : kExitSuccess;
}

} // namespace

int main(int argc, char** argv) {
    // With --json a script reads stdout, so a failure is reported there too, not only on stderr.
    bool json = false;
    for (int i = 1; i < argc; ++i) json = json || std::string(argv[i]) == "--json";
    auto failed = [&](int exit_code, const std::string& message) {
        std::cerr << "flashattn-cli: " << message << "\n";
        if (json)
            std::cout << JsonObject().string("tool", "flashattn-cli").string("result", "error")
                             .integer("exit_code", exit_code).string("error", message).str()
                      << std::endl;
        return exit_code;
    };
    try {
        Options options = parse_options(argc, argv);
        if (options.help) {
            std::cout << help_text(options.mode);
            return kExitSuccess;
        }
        if (options.threads > 0) fa_set_num_threads(options.threads);
        std::unique_ptr<Device> device = open_device(options);
        resolve_defaults(options, device->backend());
        Progress progress(true);
        if (options.mode == Options::Mode::bench) return run_bench(options, *device, progress);
        return options.problem.kvcache ? run_kvcache(options, *device, progress) : run_single(options, *device, progress);
    } catch (const UsageError& e) {
        return failed(kExitUsage, e.what());
    } catch (const flashattn::Error& e) {
        return failed(exit_code_for(e.status()), e.what());
    } catch (const std::bad_alloc&) {
        return failed(kExitFailure, "out of host memory");
    } catch (const std::exception& e) {
        return failed(kExitFailure, std::string("error: ") + e.what());
    }
}
