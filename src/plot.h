/* plot: `zinf plot`, the metrics.jsonl of one or several training runs drawn as one SVG figure of
 * four panels against the step (training and validation loss, gradient norm, learning rate,
 * throughput), one colour per run, and a PNG beside it where rsvg-convert or ImageMagick's
 * convert is on PATH. Reads with jansson; prints only to the FILE*s it is given. */
#ifndef ZINF_PLOT_H
#define ZINF_PLOT_H

#include <stdio.h>

/* Distinct colours in the palette: a figure holds at most this many runs. */
#define ZINF_PLOT_MAX_RUNS 10

/* The PNG: AUTO writes one when a converter is on PATH (a missing or failing converter is one
 * note line and the SVG alone); YES makes that an error; NO writes none. */
typedef enum { ZINF_PLOT_PNG_AUTO, ZINF_PLOT_PNG_YES, ZINF_PLOT_PNG_NO } zinf_plot_png;
/* The y axes of loss and gradient norm: AUTO is logarithmic when the panel's values are all
 * positive and span more than a factor of 10. */
typedef enum { ZINF_PLOT_LOG_AUTO, ZINF_PLOT_LOG_YES, ZINF_PLOT_LOG_NO } zinf_plot_log;

typedef struct {
    const char *const *inputs; /* run directories (holding metrics.jsonl) or metrics files */
    int ninputs;
    const char *out;           /* NULL: <run dir>/loss.svg of the only run; see zinf_plot */
    const char *title;         /* NULL: the runs' names */
    zinf_plot_png png;
    zinf_plot_log log_y;
} zinf_plot_opts;

/* Draw the figure. out: a directory (OUT/loss.svg), a name ending in .svg or .png (the SVG and
 * the PNG are that name with either ending), or a prefix to which .svg and .png are added;
 * required with several inputs. Files are written to NAME.tmp and renamed, so a viewer that
 * reloads never sees half a figure. Prints "wrote PATH" lines to `out` and the note about a
 * missing PNG converter to `note`. Returns 0 or a negative status with zinf_err's message,
 * which names the file (and line) at fault. */
int zinf_plot(const zinf_plot_opts *o, FILE *out, FILE *note);

#endif
