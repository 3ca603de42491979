"""Execute Bridge perf recipes against recording stubs: every attribute set is logged with file:line."""
import sys, types, importlib, importlib.abc, importlib.machinery, json, os, inspect
ROOT = "/tmp/recipes42/src"
LOG = []

def _where():
    f = sys._getframe(2)
    while f is not None and not f.f_code.co_filename.startswith(ROOT):
        f = f.f_back
    if f is None:
        return "?"
    return os.path.relpath(f.f_code.co_filename, ROOT + '/megatron/bridge') + ':' + str(f.f_lineno)

class Rec:
    def __init__(self, name, kwargs=None):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_vals", {})
        object.__setattr__(self, "_kw", kwargs or {})
        object.__setattr__(self, "_wh", {})
    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        v = self._vals
        if k not in v:
            v[k] = Rec(f"{self._name}.{k}")
        return v[k]
    def __setattr__(self, k, val, where=None):
        w = where or _where()
        LOG.append((f"{self._name}.{k}", describe(val), w))
        self._vals[k] = val
        self._wh[k] = w
        if isinstance(val, Rec):
            val._reparent(f"{self._name}.{k}")
    def _reparent(self, name):
        object.__setattr__(self, "_name", name)
        for k, v in list(self._vals.items()):
            if k in self._wh:
                LOG.append((f"{name}.{k}", describe(v), self._wh[k]))
            if isinstance(v, Rec):
                v._reparent(f"{name}.{k}")
    def __call__(self, *a, **kw):
        return Rec(f"{self._name}()", kw)
    def __bool__(self): return False
    def __eq__(self, o): return False
    def __ne__(self, o): return True
    def __hash__(self): return id(self)
    def __iter__(self): return iter(())
    def __lt__(self, o): return False
    __gt__ = __le__ = __ge__ = __lt__
    def __repr__(self): return f"<{self._name}{'(' + ','.join(f'{k}={v!r}' for k,v in self._kw.items()) + ')' if self._kw else ''}>"

def describe(val):
    if isinstance(val, Factory):
        return val.name
    if isinstance(val, Rec):
        return repr(val)
    try:
        json.dumps(val); return val
    except Exception:
        return repr(val)

class Factory:
    def __init__(self, name): self.name = name
    def __call__(self, *a, **kw):
        r = Rec(self.name, kw)
        w = _where()
        for k, v in kw.items():
            r.__setattr__(k, v, where=w)
        if a: object.__setattr__(r, "_args", a)
        return r
    def __getattr__(self, k):
        if k.startswith("__"): raise AttributeError(k)
        return Factory(f"{self.name}.{k}")
    def __mro_entries__(self, bases): return (object,)
    def __or__(self, o): return self
    __ror__ = __or__
    def __getitem__(self, k): return self
    def __iter__(self): return iter(())
    def __bool__(self): return True

class StubModule(types.ModuleType):
    def __getattr__(self, k):
        if k.startswith("__"): raise AttributeError(k)
        return Factory(k)

class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if (name == "megatron" or name.startswith("megatron.")) and not name.startswith(("megatron.bridge.perf_recipes", "megatron.bridge.recipes")) \
           and name not in ("megatron", "megatron.bridge") or name.split(".")[0] in ("torch", "transformer_engine", "transformers", "omegaconf", "yaml", "datasets"):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None
    def create_module(self, spec): 
        m = StubModule(spec.name); m.__path__ = []; return m
    def exec_module(self, module): pass

sys.meta_path.insert(0, Finder())
sys.path.insert(0, ROOT)
pkg = types.ModuleType("megatron"); pkg.__path__ = [ROOT + "/megatron"]; sys.modules["megatron"] = pkg
pkg2 = types.ModuleType("megatron.bridge"); pkg2.__path__ = [ROOT + "/megatron/bridge"]; sys.modules["megatron.bridge"] = pkg2

GPU = {"major": 9, "name": "NVIDIA H100"}


def _flex_module():
    """Megatron-Bridge training/flex_dispatcher_backend.py @ 067f987d L27-84, as behaviour: on a GPU that takes the
    backend, the dispatcher becomes flex with that backend and the shared-expert overlap off; deepep needs major 8/9
    or a B200/B300 name, hybridep major 8/9/10; else alltoall with no backend; no backend: nothing."""
    m = types.ModuleType("megatron.bridge.training.flex_dispatcher_backend")
    def apply_flex_dispatcher_backend(model_config, moe_flex_dispatcher_backend=None):
        n = getattr(model_config, "num_moe_experts", None)
        if n is None or (isinstance(n, int) and n == 0):
            return
        ok = {"deepep": GPU["major"] in (8, 9) or GPU["name"].startswith(("NVIDIA B200", "NVIDIA B300")),
              "hybridep": GPU["major"] in (8, 9, 10)}
        if moe_flex_dispatcher_backend not in ok:
            return
        if not ok[moe_flex_dispatcher_backend]:
            model_config.moe_token_dispatcher_type = "alltoall"
            model_config.moe_flex_dispatcher_backend = None
            return
        model_config.moe_token_dispatcher_type = "flex"
        model_config.moe_flex_dispatcher_backend = moe_flex_dispatcher_backend
        model_config.moe_shared_expert_overlap = False
    m.apply_flex_dispatcher_backend = apply_flex_dispatcher_backend
    m.validate_flex_dispatcher_backend = lambda cfg: None
    return m


sys.modules["megatron.bridge.training.flex_dispatcher_backend"] = _flex_module()


def run(modname):
    gpu = modname.split(".")[-2]
    GPU.update({"h100": {"major": 9, "name": "NVIDIA H100"}, "b200": {"major": 10, "name": "NVIDIA B200"},
                "gb200": {"major": 10, "name": "NVIDIA GB200"}}.get(gpu, GPU))
    mod = importlib.import_module(modname)
    out = {}
    for name, fn in inspect.getmembers(mod, inspect.isfunction):
        if fn.__module__ != modname or name.startswith("_"):
            continue
        LOG.clear()
        try:
            cfg = fn()
            err = None
        except Exception as e:
            err = repr(e)
        out[name] = {"line": fn.__code__.co_firstlineno, "sets": list(LOG), "error": err}
    return out

if __name__ == "__main__":
    res = {}
    for m in sys.argv[1:]:
        try:
            res[m] = run(m)
        except Exception as e:
            import traceback; traceback.print_exc(limit=-3)
            print('IMPORT FAIL', m, repr(e), file=sys.stderr)
    json.dump(res, sys.stdout, indent=0)
