/* cli: subcommands and their flags (train, config show, data), help and version text. Parsing
 * is table-driven: one table per subcommand gives each flag's type, target and help line, and the
 * same table prints --help, so the two cannot drift. */
#ifndef ZINF_CLI_H
#define ZINF_CLI_H

#include <stdio.h>

#include "comm.h"

/* Run the zinf command line; returns the process exit status. MPI is initialised inside for the
 * subcommands that need it. */
int zinf_cli_main(int argc, char **argv);

/* zinf-launch: DeepSpeed's launcher options turned into an mpirun command, printed and run. */
int zinf_launch_cli_main(int argc, char **argv);

#endif
