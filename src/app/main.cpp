// ditbatch: batch text-to-image with Qwen-Image on CPUs and GPU clusters.
#include "app/commands.h"

int main(int argc, char** argv) { return ditbatch::run_command_line(argc, argv); }
