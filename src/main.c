/* zinf: ZeRO-family transformer training over MPI. */
#include "cli.h"

int main(int argc, char **argv) { return zinf_cli_main(argc, argv); }
