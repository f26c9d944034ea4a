/* file: a whole small file read into memory, for the inputs zinf reads once (a DeepSpeed config,
 * a hostfile). */
#ifndef ZINF_FILE_H
#define ZINF_FILE_H

#include <stddef.h>

/* Read all of path into a malloc'd buffer with a NUL after its *len bytes. An error names the
 * file as "WHAT PATH: cause" (what may be NULL: "PATH: cause"). */
int zinf_read_file(const char *what, const char *path, char **buf, size_t *len);

#endif
