/* pagestore._fastget: point gets without leaving C, for pages in memory.
 *
 * A CPython extension beside the cffi core (pagestore._core): a get through
 * cffi pays for releasing and retaking the GIL, converting arguments and a
 * per-thread buffer, then Python builds the result; here one call checks the
 * key, takes the tree read lock once and builds the bytes from the copy of
 * the value. It reaches the core only through the core's function table
 * (ps_fastget.h), whose address the binding (pagestore/_native/fastget.py)
 * passes in, so this module links none of the core's code.
 *
 * It runs with the GIL held and serves only what needs no waiting: a key
 * found (or known absent) in pages in memory, or in a leaf the core reads in
 * place from the map of the page file, while the lock is free. For
 * anything else (a page miss, the lock busy, a closed core, a key that is
 * not exact bytes, an error) `get` returns the module's SLOW sentinel and
 * `get_many` calls its fallback for that key: the ordinary path, which
 * waits with the GIL released, loads pages and raises the typed error.
 * The answers are the same whichever path served them. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "ps_fastget.h"

/* Values up to this size are copied on the stack, then into the bytes
 * object; bigger ones are asked for again straight into their bytes. */
#define STACK_VALUE 2048
/* get_many gives writers a turn at the lock after this many keys. */
#define KEYS_PER_HOLD 64

static PyObject *slow;    /* the SLOW sentinel */

typedef struct {
    PyObject_HEAD
    const ps_fast_table *t;
    struct ps_core *c;
    PyObject *owner;      /* keeps the core alive: c is valid while it lives */
} Reader;

/* The value of key as a new bytes object, Py_None for an absent key (a
 * borrowed marker, not a reference), or NULL with *slow_out set (take the
 * ordinary path) or a Python error set. The caller holds the read lock. */
static PyObject *lookup(Reader *r, PyObject *key, int *slow_out) {
    char buf[STACK_VALUE];
    const char *k = PyBytes_AS_STRING(key);
    size_t klen = (size_t)PyBytes_GET_SIZE(key);
    int64_t n = r->t->get(r->c, k, klen, buf, sizeof buf);
    if (n >= 0 && (size_t)n <= sizeof buf)
        return PyBytes_FromStringAndSize(buf, (Py_ssize_t)n);
    if (n >= 0) {
        PyObject *b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
        if (b == NULL) return NULL;
        /* the lock is still held: the value cannot have changed since */
        int64_t again = r->t->get(r->c, k, klen, PyBytes_AS_STRING(b), (size_t)n);
        if (again == n) return b;
        Py_DECREF(b);
        *slow_out = 1;
        return NULL;
    }
    if (n == PS_FAST_ABSENT) return Py_None;
    *slow_out = 1;
    return NULL;
}

/* Like lookup, but waiting for the lock and loading missing pages with the
 * GIL released (get_wait): a page miss served without a round trip through
 * Python's ordinary path (~1 us of a ~4 us miss). Values over STACK_VALUE
 * and anything get_wait cannot serve set *slow_out. */
static PyObject *lookup_wait(Reader *r, PyObject *key, int missed, int *slow_out) {
    char buf[STACK_VALUE];
    const char *k = PyBytes_AS_STRING(key);
    size_t klen = (size_t)PyBytes_GET_SIZE(key);
    int64_t n;
    Py_BEGIN_ALLOW_THREADS
    n = r->t->get_wait(r->c, k, klen, buf, sizeof buf, missed);
    Py_END_ALLOW_THREADS
    if (n >= 0 && (size_t)n <= sizeof buf)
        return PyBytes_FromStringAndSize(buf, (Py_ssize_t)n);
    if (n == PS_FAST_ABSENT) return Py_None;
    *slow_out = 1;
    return NULL;
}

static PyObject *not_ready(void) {
    PyErr_SetString(PyExc_RuntimeError, "Reader used before __init__");
    return NULL;
}

PyDoc_STRVAR(get_doc,
"get(key, default) -> the value of key (bytes), default if it is not stored,\n"
"or SLOW when this path cannot answer (then take the ordinary one).");

static PyObject *Reader_get(Reader *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "get(key, default) takes exactly 2 arguments");
        return NULL;
    }
    PyObject *key = args[0];
    if (self->t == NULL) return not_ready();
    if (!PyBytes_CheckExact(key) || self->t->read_begin(self->c) != 0)
        return Py_NewRef(slow);
    int is_slow = 0;
    PyObject *v = lookup(self, key, &is_slow);
    self->t->read_end(self->c);
    if (v == Py_None) return Py_NewRef(args[1]);
    if (v == NULL && is_slow) return Py_NewRef(slow);
    return v;
}

PyDoc_STRVAR(get_or_load_doc,
"get_or_load(key, default) -> as get, but a page miss or a busy lock is\n"
"served here too, waiting and loading with the GIL released; SLOW only for\n"
"what the ordinary path must answer (errors, a page the core cannot read\n"
"itself, values over 2 KiB, a key that is not exact bytes).");

static PyObject *Reader_get_or_load(Reader *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "get_or_load(key, default) takes exactly 2 arguments");
        return NULL;
    }
    PyObject *key = args[0];
    if (self->t == NULL) return not_ready();
    if (!PyBytes_CheckExact(key)) return Py_NewRef(slow);
    int is_slow = 0, held = self->t->read_begin(self->c) == 0;
    PyObject *v = NULL;
    if (held) {
        v = lookup(self, key, &is_slow);
        self->t->read_end(self->c);
    }
    if (!held || is_slow) {
        is_slow = 0;
        v = lookup_wait(self, key, held, &is_slow);
    }
    if (v == Py_None) return Py_NewRef(args[1]);
    if (v == NULL && is_slow) return Py_NewRef(slow);
    return v;
}

PyDoc_STRVAR(get_many_doc,
"get_many(keys, default, fallback) -> list of the values of keys (a list),\n"
"default where a key is not stored; fallback(key, default) answers a key\n"
"this path cannot (called with no lock held).");

static PyObject *Reader_get_many(Reader *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "get_many(keys: list, default, fallback)");
        return NULL;
    }
    if (self->t == NULL) return not_ready();
    PyObject *keys = args[0], *dflt = args[1], *fallback = args[2];
    Py_ssize_t n = PyList_GET_SIZE(keys);
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    Py_ssize_t i = 0;
    while (i < n) {
        /* keys are read under the lock, so they must stay alive without the
         * list: a fallback may run code that changes the list */
        int held = self->t->read_begin(self->c) == 0;
        Py_ssize_t stop = i + KEYS_PER_HOLD < n ? i + KEYS_PER_HOLD : n;
        while (held && i < stop && i < PyList_GET_SIZE(keys)) {
            PyObject *key = PyList_GET_ITEM(keys, i);
            if (!PyBytes_CheckExact(key)) break;
            int is_slow = 0;
            PyObject *v = lookup(self, key, &is_slow);
            if (v == NULL) {
                if (is_slow) break;
                self->t->read_end(self->c);
                Py_DECREF(out);
                return NULL;
            }
            PyList_SET_ITEM(out, i, v == Py_None ? Py_NewRef(dflt) : v);
            i++;
        }
        if (held) self->t->read_end(self->c);
        if (i >= n) break;
        if (i >= PyList_GET_SIZE(keys)) {
            PyErr_SetString(PyExc_RuntimeError, "get_many: the list of keys changed size");
            Py_DECREF(out);
            return NULL;
        }
        if (held && i == stop) continue;         /* a turn for writers, then on */
        /* this key is not for this path: the ordinary one, without the lock */
        PyObject *key = Py_NewRef(PyList_GET_ITEM(keys, i));
        PyObject *cargs[2] = {key, dflt};
        PyObject *v = PyObject_Vectorcall(fallback, cargs, 2, NULL);
        Py_DECREF(key);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, v);
        i++;
    }
    return out;
}

static int Reader_init(Reader *self, PyObject *args, PyObject *kwds) {
    unsigned long long table, core;
    PyObject *owner;
    static char *kwlist[] = {"table", "core", "owner", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "KKO:Reader", kwlist, &table, &core, &owner))
        return -1;
    const ps_fast_table *t = (const ps_fast_table *)(uintptr_t)table;
    if (t == NULL || core == 0) {
        PyErr_SetString(PyExc_ValueError, "Reader: null table or core");
        return -1;
    }
    if (t->magic != PS_FAST_MAGIC || t->version != PS_FAST_VERSION || t->size != sizeof *t) {
        PyErr_Format(PyExc_ImportError,
                     "pagestore._fastget was built for another C core (table version %u, "
                     "this module wants %u): rebuild the extensions",
                     (unsigned)t->version, (unsigned)PS_FAST_VERSION);
        return -1;
    }
    self->t = t;
    self->c = (struct ps_core *)(uintptr_t)core;
    Py_XSETREF(self->owner, Py_NewRef(owner));
    return 0;
}

static void Reader_dealloc(Reader *self) {
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Reader_methods[] = {
    {"get", (PyCFunction)(void (*)(void))Reader_get, METH_FASTCALL, get_doc},
    {"get_or_load", (PyCFunction)(void (*)(void))Reader_get_or_load, METH_FASTCALL, get_or_load_doc},
    {"get_many", (PyCFunction)(void (*)(void))Reader_get_many, METH_FASTCALL, get_many_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(Reader_doc,
"Reader(table, core, owner): point gets of one C core, by the core's function\n"
"table at address `table` and its ps_core * at `core`; `owner` is kept alive\n"
"as long as the reader (it must keep the core alive).");

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pagestore._fastget.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = Reader_doc,
    .tp_methods = Reader_methods,
    .tp_init = (initproc)Reader_init,
    .tp_new = PyType_GenericNew,
};

/* ---- GetMethod: `Database.get` as one C call ----------------------------
 *
 * A Python method costs a frame, a state check and two attribute lookups per
 * call: at a million gets a second, a tenth of the time.  A GetMethod is the
 * class attribute `Database.get`: a method descriptor (a bound `db.get` is an
 * ordinary bound method; `db.get(k)` calls it with the store first, no bound
 * object made), so it holds no store and no store holds it.  Called with
 * (store, key[, default]) it answers from `store._reader` while
 * `store._state` is one of the states it was given; anything else (another
 * state, a reader that says SLOW, keyword arguments) goes to `func`, the
 * Python implementation, which waits, raises and names what went wrong.  It
 * reads `_state` and `_reader` from the store's __dict__ at every call, so a
 * reader the store swaps in (compact) or a state it moves to is seen at once. */

typedef struct {
    PyObject_HEAD
    PyObject *func;        /* func(store, key, default=None): the Python get */
    PyObject *open;        /* tuple of the states the reader may answer in */
    vectorcallfunc vectorcall;
} GetMethod;

static PyObject *str_state, *str_reader;

/* store's __dict__ (a new reference), or NULL with no error set */
static PyObject *dict_of(PyObject *store) {
#if PY_VERSION_HEX < 0x030C0000
    PyObject **dp = _PyObject_GetDictPtr(store);
    return dp != NULL && *dp != NULL ? Py_NewRef(*dp) : NULL;
#else
    PyObject *d = PyObject_GenericGetDict(store, NULL);
    if (d == NULL) PyErr_Clear();
    return d;
#endif
}

static PyObject *GetMethod_call(GetMethod *g, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (g->func == NULL) return not_ready();
    if (kwnames != NULL || n < 2 || n > 3 || !PyBytes_CheckExact(args[1]))
        return PyObject_Vectorcall(g->func, args, nargsf, kwnames);
    PyObject *dict = dict_of(args[0]);
    if (dict == NULL) return PyObject_Vectorcall(g->func, args, nargsf, kwnames);
    PyObject *state = PyDict_GetItemWithError(dict, str_state);      /* borrowed */
    PyObject *reader = state ? PyDict_GetItemWithError(dict, str_reader) : NULL;
    Py_XINCREF(reader);                /* the lookup may release the GIL */
    Py_DECREF(dict);
    if (PyErr_Occurred()) {
        Py_XDECREF(reader);
        return NULL;
    }
    int open = 0;
    for (Py_ssize_t i = 0; state != NULL && i < PyTuple_GET_SIZE(g->open); i++)
        open |= PyTuple_GET_ITEM(g->open, i) == state;
    if (!open || reader == NULL || !Py_IS_TYPE(reader, &ReaderType)) {
        Py_XDECREF(reader);
        return PyObject_Vectorcall(g->func, args, nargsf, kwnames);
    }
    PyObject *two[2] = {args[1], n == 3 ? args[2] : Py_None};
    PyObject *v = Reader_get_or_load((Reader *)reader, two, 2);
    Py_DECREF(reader);
    if (v != slow) return v;
    Py_DECREF(v);
    return PyObject_Vectorcall(g->func, args, nargsf, kwnames);
}

static int GetMethod_init(GetMethod *g, PyObject *args, PyObject *kwds) {
    PyObject *func, *open;
    static char *kwlist[] = {"func", "open_states", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!:GetMethod", kwlist, &func, &PyTuple_Type, &open))
        return -1;
    if (!PyCallable_Check(func)) {
        PyErr_SetString(PyExc_TypeError, "GetMethod: func must be callable");
        return -1;
    }
    Py_XSETREF(g->func, Py_NewRef(func));
    Py_XSETREF(g->open, Py_NewRef(open));
    g->vectorcall = (vectorcallfunc)GetMethod_call;
    return 0;
}

static PyObject *GetMethod_tp_call(GetMethod *g, PyObject *args, PyObject *kwds) {
    if (g->vectorcall == NULL) return not_ready();
    return PyVectorcall_Call((PyObject *)g, args, kwds);
}

static PyObject *GetMethod_descr_get(PyObject *self, PyObject *obj, PyObject *type) {
    (void)type;
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static int GetMethod_traverse(GetMethod *g, visitproc visit, void *arg) {
    Py_VISIT(g->func);
    Py_VISIT(g->open);
    return 0;
}

static int GetMethod_clear(GetMethod *g) {
    g->vectorcall = NULL;
    Py_CLEAR(g->func);
    Py_CLEAR(g->open);
    return 0;
}

static void GetMethod_dealloc(GetMethod *g) {
    PyObject_GC_UnTrack(g);
    GetMethod_clear(g);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

/* __doc__, __name__, __qualname__, __module__ are func's; __wrapped__ is func
 * itself, so inspect.signature and help() show its signature */
static PyObject *GetMethod_attr(GetMethod *g, void *name) {
    if (g->func == NULL) return not_ready();
    if (strcmp((const char *)name, "__wrapped__") == 0) return Py_NewRef(g->func);
    return PyObject_GetAttrString(g->func, (const char *)name);
}

static PyGetSetDef GetMethod_getset[] = {
    {"__doc__", (getter)GetMethod_attr, NULL, NULL, "__doc__"},
    {"__name__", (getter)GetMethod_attr, NULL, NULL, "__name__"},
    {"__qualname__", (getter)GetMethod_attr, NULL, NULL, "__qualname__"},
    {"__module__", (getter)GetMethod_attr, NULL, NULL, "__module__"},
    {"__wrapped__", (getter)GetMethod_attr, NULL, NULL, "__wrapped__"},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *GetMethod_repr(GetMethod *g) {
    if (g->func == NULL) return PyUnicode_FromString("<GetMethod (not ready)>");
    return PyUnicode_FromFormat("<C-served %R>", g->func);
}

static PyTypeObject GetMethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pagestore._fastget.GetMethod",
    .tp_basicsize = sizeof(GetMethod),
    .tp_dealloc = (destructor)GetMethod_dealloc,
    .tp_vectorcall_offset = offsetof(GetMethod, vectorcall),
    .tp_call = (ternaryfunc)GetMethod_tp_call,
    .tp_repr = (reprfunc)GetMethod_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_traverse = (traverseproc)GetMethod_traverse,
    .tp_clear = (inquiry)GetMethod_clear,
    .tp_getset = GetMethod_getset,
    .tp_descr_get = GetMethod_descr_get,
    .tp_init = (initproc)GetMethod_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pagestore._fastget",
    .m_doc = "Point gets of pages in memory, with the GIL held (csrc/fastget.c).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__fastget(void) {
    if (PyType_Ready(&ReaderType) < 0 || PyType_Ready(&GetMethodType) < 0) return NULL;
    if (str_state == NULL && (str_state = PyUnicode_InternFromString("_state")) == NULL) return NULL;
    if (str_reader == NULL && (str_reader = PyUnicode_InternFromString("_reader")) == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (slow == NULL) {
        slow = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
        if (slow == NULL) goto fail;
    }
    if (PyModule_AddObjectRef(m, "SLOW", slow) < 0) goto fail;
    if (PyModule_AddObjectRef(m, "Reader", (PyObject *)&ReaderType) < 0) goto fail;
    if (PyModule_AddObjectRef(m, "GetMethod", (PyObject *)&GetMethodType) < 0) goto fail;
    if (PyModule_AddIntConstant(m, "TABLE_VERSION", PS_FAST_VERSION) < 0) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
