/* zinf-launch: DeepSpeed's launcher options turned into an OpenMPI mpirun command (src/launch.h). */
#include "cli.h"

int main(int argc, char **argv) { return zinf_launch_cli_main(argc, argv); }
