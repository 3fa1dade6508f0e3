#include "progress.h"

#include <cstdio>
#include <unistd.h>

namespace flashattn::cli {
namespace {

constexpr double kTerminalDelay_s = 0.5;  // before the first redraw
constexpr double kPlainFirstLine_s = 5.0; // before the first plain line
constexpr double kPlainInterval_s = 15.0; // between plain lines
constexpr auto kRedrawPeriod = std::chrono::milliseconds(200);

} // namespace

Progress::Progress(bool enabled) : enabled_(enabled), terminal_(isatty(STDERR_FILENO) != 0) {
    if (enabled_) drawer_ = std::thread([this] { draw_loop(); });
}

Progress::~Progress() {
    end();
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (drawer_.joinable()) drawer_.join();
}

void Progress::begin(const std::string& label, int total) {
    end();
    std::lock_guard<std::mutex> lock(mutex_);
    active_ = true;
    label_ = label;
    total_ = total;
    done_ = 0;
    started_ = Clock::now();
    next_plain_line_s_ = kPlainFirstLine_s;
    plain_lines_printed_ = false;
}

void Progress::advance(int done) {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = done;
}

void Progress::end() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!active_) return;
    active_ = false;
    const double elapsed = std::chrono::duration<double>(Clock::now() - started_).count();
    if (line_shown_) std::fputs("\r\033[K", stderr);
    line_shown_ = false;
    if (plain_lines_printed_) std::fprintf(stderr, "%s: done in %.1f s\n", label_.c_str(), elapsed);
    std::fflush(stderr);
}

std::string Progress::status_text(double elapsed_s) const {
    char text[64];
    if (total_ > 0)
        std::snprintf(text, sizeof text, " %d/%d  %.1f s", done_, total_, elapsed_s);
    else
        std::snprintf(text, sizeof text, "  %.1f s", elapsed_s);
    return label_ + text;
}

void Progress::draw_loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
        wake_.wait_for(lock, kRedrawPeriod);
        if (stopping_ || !active_) continue;
        const double elapsed = std::chrono::duration<double>(Clock::now() - started_).count();
        if (terminal_) {
            if (elapsed < kTerminalDelay_s) continue;
            std::fprintf(stderr, "\r\033[K%s", status_text(elapsed).c_str());
            line_shown_ = true;
        } else {
            if (elapsed < next_plain_line_s_) continue;
            std::fprintf(stderr, "%s\n", status_text(elapsed).c_str());
            next_plain_line_s_ += kPlainInterval_s;
            plain_lines_printed_ = true;
        }
        std::fflush(stderr);
    }
}

} // namespace flashattn::cli
