/* Scalar HDF5 attributes: see h5attr.h. */
#include "h5attr.h"

#include <string.h>

int zinf_h5_attr_num(hid_t obj, const char *name, hid_t ft, hid_t mt, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, mt, v) < 0 ? -1 : 0;
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    return rc;
}

int zinf_h5_attr_i64(hid_t obj, const char *name, int64_t v)
{
    return zinf_h5_attr_num(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

int zinf_h5_attr_u64(hid_t obj, const char *name, uint64_t v)
{
    return zinf_h5_attr_num(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v);
}

int zinf_h5_attr_f64(hid_t obj, const char *name, double v)
{
    return zinf_h5_attr_num(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}

int zinf_h5_attr_str(hid_t obj, const char *name, const char *v)
{
    hid_t ty = H5Tcopy(H5T_C_S1);
    H5Tset_size(ty, strlen(v) + 1);
    int rc = zinf_h5_attr_num(obj, name, ty, ty, v);
    H5Tclose(ty);
    return rc;
}

int zinf_h5_get_num(hid_t obj, const char *name, hid_t mt, void *out)
{
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return -1;
    int rc = H5Aread(a, mt, out) < 0 ? -1 : 0;
    H5Aclose(a);
    return rc;
}

H5T_class_t zinf_h5_num_class(hid_t obj, const char *name)
{
    if (H5Aexists(obj, name) <= 0) return H5T_NO_CLASS;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return H5T_NO_CLASS;
    hid_t t = H5Aget_type(a);
    H5T_class_t c = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return c;
}
