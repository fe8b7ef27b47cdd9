// A stop signal is said when it arrives, by the handler itself: the loop says it only at the
// end of a denoising step, and a VAE decode or a blocked read can keep it from that for minutes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <csignal>
#include <ctime>
#include <regex>
#include <string>

#include "pipeline/stop_signal.h"

using namespace ditbatch;

TEST(StopSignal, ASignalIsSaidWhenItArrivesInTheLogsFormat) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  install_stop_handlers();
  acknowledge_stop_signals(2, 4, fds[1]);
  const time_t before = ::time(nullptr);
  ASSERT_EQ(std::raise(SIGTERM), 0);  // the handler has run when raise returns
  const time_t after = ::time(nullptr);
  stop_acknowledging_signals();
  ::close(fds[1]);
  std::string said;
  char buffer[512];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) said.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  EXPECT_TRUE(stop_requested());
  EXPECT_EQ(stop_signal_number(), SIGTERM);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(said, m,
                               std::regex(R"(\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\.\d{3}\] \[rank 2/4\] \[warning\] )"
                                          R"(SIGTERM \(signal 15\) received: taking no new image; the one in )"
                                          R"(progress is finished, then the run stops \(a second signal, a second )"
                                          R"(or more later, abandons it\)\n)")))
      << said;
  // The time stamp is the local time, as strftime writes it (the log's other lines are spdlog's, local).
  auto local = [](time_t t) {
    tm parts{};
    localtime_r(&t, &parts);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &parts);
    return std::string(text);
  };
  bool matches = false;
  for (time_t t = before; t <= after; ++t) matches = matches || m[1] == local(t);
  EXPECT_TRUE(matches) << m[1] << " is not between " << local(before) << " and " << local(after);
}
