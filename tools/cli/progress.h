// A status line on stderr for phases that take a while (timed iterations, the reference, a bench
// grid): redrawn in place on a terminal, plain lines when stderr is a file or a pipe (logs, CI).
// Phases shorter than a moment print nothing, so quick runs keep a clean output.
//
// A background thread does the drawing, so the elapsed time keeps moving while the main thread sits
// in one long blocking call (an fp64 reference pass can take minutes).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace flashattn::cli {

class Progress {
public:
    explicit Progress(bool enabled);
    ~Progress();
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    // `total` > 0 shows "done/total"; 0 shows only the elapsed time.
    void begin(const std::string& label, int total = 0);
    void advance(int done);
    void end();

private:
    using Clock = std::chrono::steady_clock;
    void draw_loop();
    std::string status_text(double elapsed_s) const; // caller holds mutex_

    const bool enabled_;
    const bool terminal_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::thread drawer_;
    bool stopping_ = false;

    bool active_ = false;
    std::string label_;
    int total_ = 0, done_ = 0;
    Clock::time_point started_;
    bool line_shown_ = false;       // terminal: something to erase at end()
    double next_plain_line_s_ = 0;  // not a terminal: when the next plain line is due
    bool plain_lines_printed_ = false;
};

} // namespace flashattn::cli
