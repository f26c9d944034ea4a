/* Scalar HDF5 attributes, the one way ckpt.c (checkpoints) and ckpt_tool.c (info, verify,
 * export) write and read them. Each returns 0 or -1; the caller names the file in its message. */
#ifndef ZINF_H5ATTR_H
#define ZINF_H5ATTR_H

#include <hdf5.h>
#include <stdint.h>

/* a scalar numeric attribute of file type ft from a value of memory type mt */
int zinf_h5_attr_num(hid_t obj, const char *name, hid_t ft, hid_t mt, const void *v);
int zinf_h5_attr_i64(hid_t obj, const char *name, int64_t v);
int zinf_h5_attr_u64(hid_t obj, const char *name, uint64_t v);
int zinf_h5_attr_f64(hid_t obj, const char *name, double v);
/* a fixed-length string attribute */
int zinf_h5_attr_str(hid_t obj, const char *name, const char *v);
/* a scalar numeric attribute converted to memory type mt; -1 when missing */
int zinf_h5_get_num(hid_t obj, const char *name, hid_t mt, void *out);
/* the type class (H5T_INTEGER, H5T_FLOAT, ...) an attribute is stored with; H5T_NO_CLASS when
 * it is missing */
H5T_class_t zinf_h5_num_class(hid_t obj, const char *name);

#endif
