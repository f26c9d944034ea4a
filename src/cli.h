/* cli: subcommands and their flags (train, config show, data, estimate, io-bench, ckpt), help and
 * version text. Parsing is table-driven: one table per subcommand gives each flag's type, target
 * and help line, and the same table prints --help, so the two cannot drift. Every subcommand
 * follows the same rules: a dash in a name is an underscore, --flag value or --flag=value, a
 * boolean alone is true, -h is --help, and a misspelt flag is an error that names the nearest. */
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
