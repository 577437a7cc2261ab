/* The record loop's commonest case in C: an owner's heartbeat (and duplicates), applied
 * exactly as world/engine.py's inline path applies them.
 *
 * marshal_py.world.engine uses it when it was built (optional, like _macs.c): the loop hands
 * it the records from an index on, and it applies the run of records it can apply without
 * deciding anything the Python rules decide — duplicates (a position already read) and
 * version 1 Heartbeats whose sender owns the claim, whose group is alive at the record's time,
 * with canonical fields — and stops, before changing anything, at the first record it cannot
 * (another type, another coordination partition, a route or claim not cached yet, a sender
 * that is not the owner, a broker clock that went back, a member not yet seen). The Python
 * loop applies that record and calls again. It reads and writes the objects' slots directly
 * (their offsets found once, by configure(), from the classes' slot descriptors).
 *
 *   configure(record_cls, route_cls, pair_cls, life_cls, claim_cls)
 *   run(records, i, at_p, at_next, sent_ok, routes)
 *       -> (i, at_next, ts, sent_ok, beats, duplicates)
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

static PyTypeObject *record_type, *route_type, *pair_type, *life_type, *claim_type;
/* Slot offsets. */
static Py_ssize_t rec_partition, rec_position, rec_timestamp, rec_value;
static Py_ssize_t route_home, route_pair, route_claim, route_owner;
static Py_ssize_t pair_open_from, pair_life;
static Py_ssize_t life_due, life_intervals, life_members, life_shared;
static Py_ssize_t claim_owner, claim_last, claim_transactional, claim_committed, claim_interval;
static PyObject *forget_name;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static int
offset_of(PyTypeObject *type, const char *name, Py_ssize_t *out)
{
    PyObject *descr = PyObject_GetAttrString((PyObject *)type, name);
    if (descr == NULL)
        return -1;
    if (Py_TYPE(descr) != &PyMemberDescr_Type) {
        Py_DECREF(descr);
        PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", type->tp_name, name);
        return -1;
    }
    *out = ((PyMemberDescrObject *)descr)->d_member->offset;
    Py_DECREF(descr);
    return 0;
}

static PyObject *
configure(PyObject *module, PyObject *args)
{
    PyTypeObject *types[5];
    int i;

    (void)module;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!:configure", &PyType_Type, &types[0],
                          &PyType_Type, &types[1], &PyType_Type, &types[2],
                          &PyType_Type, &types[3], &PyType_Type, &types[4]))
        return NULL;
    if (offset_of(types[0], "partition", &rec_partition) < 0
        || offset_of(types[0], "position", &rec_position) < 0
        || offset_of(types[0], "timestamp_ms", &rec_timestamp) < 0
        || offset_of(types[0], "value", &rec_value) < 0
        || offset_of(types[1], "home", &route_home) < 0
        || offset_of(types[1], "pair", &route_pair) < 0
        || offset_of(types[1], "claim", &route_claim) < 0
        || offset_of(types[1], "owner", &route_owner) < 0
        || offset_of(types[2], "open_from", &pair_open_from) < 0
        || offset_of(types[2], "life", &pair_life) < 0
        || offset_of(types[3], "due", &life_due) < 0
        || offset_of(types[3], "intervals", &life_intervals) < 0
        || offset_of(types[3], "members", &life_members) < 0
        || offset_of(types[3], "shared", &life_shared) < 0
        || offset_of(types[4], "owner", &claim_owner) < 0
        || offset_of(types[4], "last_heartbeat_ms", &claim_last) < 0
        || offset_of(types[4], "transactional", &claim_transactional) < 0
        || offset_of(types[4], "committed_offset", &claim_committed) < 0
        || offset_of(types[4], "heartbeat_interval_ms", &claim_interval) < 0)
        return NULL;
    for (i = 0; i < 5; i++)
        Py_INCREF(types[i]);
    Py_XDECREF(record_type);
    Py_XDECREF(route_type);
    Py_XDECREF(pair_type);
    Py_XDECREF(life_type);
    Py_XDECREF(claim_type);
    record_type = types[0];
    route_type = types[1];
    pair_type = types[2];
    life_type = types[3];
    claim_type = types[4];
    Py_RETURN_NONE;
}

/* A canonical non-negative decimal of at most 18 digits; leading zero refused unless
 * allow_zero and the text is "0". -1 when not. */
static long long
canonical(const char *s, Py_ssize_t n, int allow_zero)
{
    long long v = 0;
    Py_ssize_t k;

    if (n < 1 || n > 18)
        return -1;
    if (s[0] == '0' && !(allow_zero && n == 1))
        return -1;
    for (k = 0; k < n; k++) {
        if (s[k] < '0' || s[k] > '9')
            return -1;
        v = v * 10 + (s[k] - '0');
    }
    return v;
}

/* An exact int's value in *out: 0, or -1 (not an exact int, or beyond 64 bits). */
static int
as_ll(PyObject *o, long long *out)
{
    int overflow = 0;

    if (o == NULL || !PyLong_CheckExact(o))
        return -1;
    *out = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0 || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* Replace a slot's value (new reference stolen). */
static void
set_slot(PyObject *obj, Py_ssize_t off, PyObject *value)
{
    PyObject *old = SLOT(obj, off);
    SLOT(obj, off) = value;
    Py_XDECREF(old);
}

static PyObject *
run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *records, *sent_ok, *routes;
    Py_ssize_t i, n;
    long long at_p, at_next, ts = -1, beats = 0, dups = 0;

    (void)module;
    if (nargs != 6 || !PyList_Check(args[0]) || !PyDict_Check(args[5])
        || !PyBytes_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "run(records: list, i, at_p, at_next, sent_ok: bytes, routes: dict)");
        return NULL;
    }
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() first");
        return NULL;
    }
    records = args[0];
    i = PyLong_AsSsize_t(args[1]);
    at_p = PyLong_AsLongLong(args[2]);
    at_next = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    sent_ok = args[4];
    Py_INCREF(sent_ok);
    routes = args[5];
    n = PyList_GET_SIZE(records);

    for (; i < n; i++) {
        PyObject *record = PyList_GET_ITEM(records, i);
        PyObject *o, *value, *key, *route, *pair, *life, *claim, *sender, *owner, *last;
        PyObject *members, *seen, *announced, *shared, *stamp;
        const char *v, *end, *s1, *s2, *s3, *cut;
        long long p, pos, rec_ts, offset, number;
        Py_ssize_t len;
        int same, is_shared;

        if (Py_TYPE(record) != record_type)
            break;
        if (as_ll(SLOT(record, rec_partition), &p) < 0 || p != at_p)
            break;
        if (as_ll(SLOT(record, rec_position), &pos) < 0)
            break;
        if (pos < at_next) {
            dups++;
            continue;
        }
        if (as_ll(SLOT(record, rec_timestamp), &rec_ts) < 0)
            break;
        value = SLOT(record, rec_value);
        if (value == NULL || !PyBytes_CheckExact(value))
            break;
        v = PyBytes_AS_STRING(value);
        len = PyBytes_GET_SIZE(value);
        end = v + len;
        /* Heartbeat/1/<sent>/<key>/<offset> */
        if (len < 14 || memcmp(v, "Heartbeat/1/", 12) != 0)
            break;
        s1 = v + 12;
        s2 = memchr(s1, '/', (size_t)(end - s1));
        if (s2 == NULL)
            break;
        if (PyBytes_GET_SIZE(sent_ok) == s2 - s1
            && memcmp(PyBytes_AS_STRING(sent_ok), s1, (size_t)(s2 - s1)) == 0) {
            /* the sent-at field already checked */
        } else if (canonical(s1, s2 - s1, 1) >= 0) {
            PyObject *fresh = PyBytes_FromStringAndSize(s1, s2 - s1);
            if (fresh == NULL)
                goto error;
            Py_SETREF(sent_ok, fresh);
        } else {
            break;
        }
        s3 = s2 + 1;
        cut = NULL;
        for (const char *c = end - 1; c >= s3; c--) {
            if (*c == '/') {
                cut = c;
                break;
            }
        }
        if (cut == NULL)
            break;
        offset = canonical(cut + 1, end - cut - 1, 0);
        if (offset < 0)
            break;
        key = PyBytes_FromStringAndSize(s3, cut - s3);
        if (key == NULL)
            goto error;
        route = PyDict_GetItemWithError(routes, key); /* borrowed */
        Py_DECREF(key);
        if (route == NULL) {
            if (PyErr_Occurred())
                goto error;
            break;
        }
        if (Py_TYPE(route) != route_type)
            break;
        if (as_ll(SLOT(route, route_home), &number) < 0 || number != p)
            break;
        pair = SLOT(route, route_pair);
        if (pair == NULL || Py_TYPE(pair) != pair_type)
            break;
        if (as_ll(SLOT(pair, pair_open_from), &number) < 0 || pos < number)
            break;
        life = SLOT(pair, pair_life);
        if (life == NULL || Py_TYPE(life) != life_type)
            break;
        if (as_ll(SLOT(life, life_due), &number) < 0 || rec_ts > number)
            break;
        claim = SLOT(route, route_claim);
        if (claim == NULL || Py_TYPE(claim) != claim_type)
            break;
        sender = SLOT(route, route_owner);
        owner = SLOT(claim, claim_owner);
        if (sender == NULL || owner == NULL)
            break;
        if (owner != sender) {
            same = PyObject_RichCompareBool(owner, sender, Py_EQ);
            if (same < 0)
                goto error;
            if (!same)
                break;
        }
        last = SLOT(claim, claim_last);
        if (last == NULL)
            break;
        if (last != Py_None && (as_ll(last, &number) < 0 || rec_ts < number))
            break; /* a broker clock that went back: Python re-arms the index */
        members = SLOT(life, life_members);
        if (members == NULL || !PyDict_CheckExact(members))
            break;
        seen = PyDict_GetItemWithError(members, sender); /* borrowed */
        if (seen == NULL) {
            if (PyErr_Occurred())
                goto error;
            break; /* a member not seen yet: Python's life.seen() */
        }
        if (as_ll(seen, &number) < 0 || rec_ts < number)
            break;
        o = SLOT(claim, claim_transactional);
        if (o != Py_True && o != Py_False)
            break;
        shared = SLOT(life, life_shared);
        if (shared == NULL)
            break;
        is_shared = PyObject_IsTrue(shared);
        if (is_shared < 0)
            goto error;
        {
            PyObject *intervals = SLOT(life, life_intervals);
            if (intervals == NULL || !PyDict_CheckExact(intervals))
                break;
            announced = PyDict_GetItemWithError(intervals, sender); /* borrowed */
            if (announced == NULL && PyErr_Occurred())
                goto error;
        }
        /* Every check passed: apply (ExclusiveRules' heartbeat, as engine.py inlines it). */
        stamp = PyLong_FromLongLong(rec_ts);
        if (stamp == NULL)
            goto error;
        Py_INCREF(stamp);
        set_slot(claim, claim_last, stamp);
        if (o == Py_False) {
            PyObject *committed = PyLong_FromLongLong(offset);
            if (committed == NULL) {
                Py_DECREF(stamp);
                goto error;
            }
            set_slot(claim, claim_committed, committed);
        }
        if (announced != NULL) {
            Py_INCREF(announced);
            set_slot(claim, claim_interval, announced);
        }
        if (PyDict_SetItem(members, sender, stamp) < 0) {
            Py_DECREF(stamp);
            goto error;
        }
        Py_DECREF(stamp);
        if (is_shared) {
            PyObject *r = PyObject_CallMethodNoArgs(life, forget_name);
            if (r == NULL)
                goto error;
            Py_DECREF(r);
        }
        at_next = pos + 1;
        ts = rec_ts;
        beats++;
        continue;
    }
    {
        PyObject *result = Py_BuildValue("(nLLOLL)", i, at_next, ts, sent_ok, beats, dups);
        Py_DECREF(sent_ok);
        return result;
    }
error:
    Py_DECREF(sent_ok);
    return NULL;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(record_cls, route_cls, pair_cls, life_cls, claim_cls): find their slots"},
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL,
     "run(records, i, at_p, at_next, sent_ok, routes) -> (i, at_next, ts, sent_ok, beats, "
     "duplicates)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "marshal_py.world._feed",
    "The record loop's owners' heartbeats in C (see marshal_py.world.engine).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__feed(void)
{
    forget_name = PyUnicode_InternFromString("forget_live_view");
    if (forget_name == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
