/* The MAC check of signed coordination records (PROTOCOL.md, authenticated groups) in C.
 *
 * marshal_py.world.macs uses it when it was built (optional, like client/_fastpath.c): the
 * same HMAC-SHA256 as the Python build, computed from keyed SHA-256 states kept as plain
 * structs, so that a record costs two state copies and three block compressions instead of
 * a dozen Python calls and two hash-object allocations. It decides nothing but "does this
 * MAC match one of these keys"; every rule stays in Python (world/signed_path.py).
 *
 *   prepare(secret, prefix) -> bytes     the keyed inner state (fed the ipad block and the
 *                                        MAC input's fixed start) and the keyed outer state
 *   matches(prepared, raw_seq, body, raw_mac) -> bool
 *                                        is raw_mac the unpadded base64url HMAC of
 *                                        prefix + raw_seq + "\n" + body under one of the
 *                                        prepared keys (a sequence of prepare() results)?
 */

#define PY_SSIZE_T_CLEAN
#define OPENSSL_SUPPRESS_DEPRECATED
#include <Python.h>
#include <openssl/sha.h>
#include <string.h>

#define BLOCK 64
#define MAC_CHARS 43 /* 32 bytes in unpadded base64url */

typedef struct {
    SHA256_CTX inner;
    SHA256_CTX outer;
} Keyed;

static const char URL_ALPHABET[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static PyObject *
prepare(PyObject *module, PyObject *args)
{
    Py_buffer secret, prefix;
    unsigned char key[BLOCK], pad[BLOCK];
    Keyed keyed;
    int i;

    if (!PyArg_ParseTuple(args, "y*y*:prepare", &secret, &prefix))
        return NULL;
    memset(key, 0, sizeof key);
    if (secret.len > BLOCK)
        SHA256((const unsigned char *)secret.buf, (size_t)secret.len, key);
    else
        memcpy(key, secret.buf, (size_t)secret.len);
    for (i = 0; i < BLOCK; i++)
        pad[i] = key[i] ^ 0x36;
    SHA256_Init(&keyed.inner);
    SHA256_Update(&keyed.inner, pad, BLOCK);
    SHA256_Update(&keyed.inner, prefix.buf, (size_t)prefix.len);
    for (i = 0; i < BLOCK; i++)
        pad[i] = key[i] ^ 0x5C;
    SHA256_Init(&keyed.outer);
    SHA256_Update(&keyed.outer, pad, BLOCK);
    PyBuffer_Release(&secret);
    PyBuffer_Release(&prefix);
    return PyBytes_FromStringAndSize((const char *)&keyed, sizeof keyed);
}

/* The unpadded base64url text of the 32-byte digest: 43 characters. */
static void
url_text(const unsigned char *d, char *out)
{
    int i, o = 0;
    unsigned long v;

    for (i = 0; i < 30; i += 3) {
        v = ((unsigned long)d[i] << 16) | ((unsigned long)d[i + 1] << 8) | d[i + 2];
        out[o++] = URL_ALPHABET[(v >> 18) & 63];
        out[o++] = URL_ALPHABET[(v >> 12) & 63];
        out[o++] = URL_ALPHABET[(v >> 6) & 63];
        out[o++] = URL_ALPHABET[v & 63];
    }
    v = ((unsigned long)d[30] << 16) | ((unsigned long)d[31] << 8);
    out[o++] = URL_ALPHABET[(v >> 18) & 63];
    out[o++] = URL_ALPHABET[(v >> 12) & 63];
    out[o++] = URL_ALPHABET[(v >> 6) & 63];
}

static PyObject *
matches(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *seq, *fast;
    const char *raw_seq, *body, *raw_mac;
    Py_ssize_t seq_len, body_len, mac_len, n, k;
    Keyed keyed;
    SHA256_CTX ctx;
    unsigned char digest[SHA256_DIGEST_LENGTH];
    char text[MAC_CHARS];
    unsigned char differ;
    int i;

    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "matches(prepared, raw_seq, body, raw_mac)");
        return NULL;
    }
    if (!PyBytes_Check(args[1]) || !PyBytes_Check(args[2]) || !PyBytes_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "raw_seq, body and raw_mac must be bytes");
        return NULL;
    }
    raw_seq = PyBytes_AS_STRING(args[1]);
    seq_len = PyBytes_GET_SIZE(args[1]);
    body = PyBytes_AS_STRING(args[2]);
    body_len = PyBytes_GET_SIZE(args[2]);
    raw_mac = PyBytes_AS_STRING(args[3]);
    mac_len = PyBytes_GET_SIZE(args[3]);
    seq = args[0];
    fast = PySequence_Fast(seq, "prepared must be a sequence of prepare() results");
    if (fast == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(fast);
    for (k = 0; k < n; k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, k);
        if (!PyBytes_Check(item) || PyBytes_GET_SIZE(item) != (Py_ssize_t)sizeof keyed) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_TypeError, "prepared must hold prepare() results");
            return NULL;
        }
        if (mac_len != MAC_CHARS)
            continue;
        memcpy(&keyed, PyBytes_AS_STRING(item), sizeof keyed);
        ctx = keyed.inner;
        SHA256_Update(&ctx, raw_seq, (size_t)seq_len);
        SHA256_Update(&ctx, "\n", 1);
        SHA256_Update(&ctx, body, (size_t)body_len);
        SHA256_Final(digest, &ctx);
        ctx = keyed.outer;
        SHA256_Update(&ctx, digest, sizeof digest);
        SHA256_Final(digest, &ctx);
        url_text(digest, text);
        differ = 0; /* compared in constant time, as hmac.compare_digest does */
        for (i = 0; i < MAC_CHARS; i++)
            differ |= (unsigned char)(text[i] ^ raw_mac[i]);
        if (differ == 0) {
            Py_DECREF(fast);
            Py_RETURN_TRUE;
        }
    }
    Py_DECREF(fast);
    Py_RETURN_FALSE;
}

static PyMethodDef methods[] = {
    {"prepare", prepare, METH_VARARGS,
     "prepare(secret, prefix) -> the keyed HMAC-SHA256 states of a key, as bytes"},
    {"matches", (PyCFunction)(void (*)(void))matches, METH_FASTCALL,
     "matches(prepared, raw_seq, body, raw_mac) -> is raw_mac the MAC under one of them"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "marshal_py.world._macs",
    "The MAC check of signed records in C (see marshal_py.world.macs).", -1, methods,
};

PyMODINIT_FUNC
PyInit__macs(void)
{
    return PyModule_Create(&module_def);
}
