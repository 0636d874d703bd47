"""PuzzleLib's `Containers`: Sequential, Parallel, Graph and Node over Tessera's, so a
whole network runs in Tessera's C++ executor while its children stay reachable as the
namespace's modules (`seq["conv1"].W`, `seq.getByName("fc")`, `seq[:2]`)."""

import tessera as ts

from ._core import Module, ModuleError


class ContainerError(ModuleError):
    pass


class Container(Module):
    def __init__(self, tmod, name=None):
        super().__init__(tmod, name)
        # PuzzleLib's modules keep their data after backward (handlers and scripts read it):
        # Tessera's containers otherwise release what backward has used.
        tmod.releaseInBackward = False
        self.modules = {}

    def _adopt(self, mod, acquire=True):
        if not isinstance(mod, Module):
            raise ContainerError(f"{self}: expected a module of tessera.puzzlelib, got {type(mod).__name__}")
        if mod.name is None or (mod.name in self.modules and acquire):
            mod.name = str(len(self.modules))
        elif mod.name in self.modules:
            raise ContainerError(f"Module with name '{mod.name}' is already in container")
        self.modules[mod.name] = mod

    def getByName(self, name):
        """The module called `name` here or in any container below (depth first), or None."""
        if name in self.modules:
            return self.modules[name]
        for m in self.modules.values():
            if isinstance(m, Container):
                found = m.getByName(name)
                if found is not None:
                    return found
        return None

    def getAllByType(self, typ):
        found = []
        for m in self.modules.values():
            if isinstance(m, typ):
                found.append(m)
            elif isinstance(m, Container):
                found.extend(m.getAllByType(typ))
        return found

    def __getitem__(self, item):
        if isinstance(item, str):
            if item not in self.modules:
                raise ContainerError(f"{self}: no child named '{item}' (children: {list(self.modules)})")
            return self.modules[item]
        raise ContainerError(f"{self}: children are found by name, got {type(item).__name__} {item!r}")

    def getVar(self, name):
        head, _, rest = name.partition(".")
        if not rest:
            raise ContainerError(f"Cannot find dot-delimiter in variable name: {name}")
        return self[head].getVar(rest)

    def setVar(self, name, var):
        head, _, rest = name.partition(".")
        if not rest:
            raise ContainerError(f"Cannot find dot-delimiter in variable name: {name}")
        self[head].setVar(rest, var)

    @property
    def vars(self):
        return {}

    def getVarTable(self):
        table = {}
        for m in self.modules.values():
            for var, names in m.getVarTable().items():
                table[var] = [f"{m.name}.{n}" for n in names]
        return table

    def getBlueprint(self):
        bp = super().getBlueprint()
        bp["modules"] = {n: m.getBlueprint() for n, m in self.modules.items()}
        return bp

    def _saveInto(self, hdf, varlinks, name, compress):
        for m in self.modules.values():
            m._saveInto(hdf, varlinks, f"{name}.{m.name}", compress)
        hdf.require_group(f"attrs.{name}")

    def _loadFrom(self, hdf, name):
        for m in self.modules.values():
            m._loadFrom(hdf, f"{name}.{m.name}")

    def __len__(self):
        return len(self.modules)

    def __iter__(self):
        return iter(self.modules.values())

    def __str__(self):
        return f"Container {type(self).__name__} (name: {self.name})"

    __repr__ = __str__


class Sequential(Container):
    def __init__(self, name=None):
        super().__init__(ts.Sequential(name), name)

    def append(self, mod, acquire=True):
        self._adopt(mod, acquire)
        self._m.append(mod.module)
        return self

    def extend(self, container, acquire=True):
        for mod in (container.modules.values() if isinstance(container, Container) else container):
            self.append(mod, acquire)
        return self

    def __getitem__(self, item):
        if isinstance(item, int):
            return list(self.modules.values())[item]
        if isinstance(item, slice):
            part = Sequential()
            for mod in list(self.modules.values())[item]:  # the same modules, shared
                part.modules[mod.name] = mod
                part._m.append(mod.module)
            return part
        return Container.__getitem__(self, item)


class Parallel(Container):
    def __init__(self, name=None):
        super().__init__(ts.Parallel(name), name)

    def append(self, mod, acquire=True):
        self._adopt(mod, acquire)
        self._m.append(mod.module)
        return self

    def __getitem__(self, item):
        if isinstance(item, int):
            return list(self.modules.values())[item]
        return Container.__getitem__(self, item)


class Node:
    """PuzzleLib's Node: a module of the namespace wrapped as a vertex of a graph.
    `parents` is None, a Node, a (Node, slot) pair or a list of them."""

    def __init__(self, mod, parents=None, name=None):
        self.module = mod
        self.parents = [] if parents is None else (list(parents) if isinstance(parents, list) else [parents])
        tparents = [(p[0]._n, p[1]) if isinstance(p, tuple) else p._n for p in self.parents]
        if hasattr(mod, "_fit"):  # ToList: one output per parent
            mod._fit(max(len(tparents), 1))
        self._n = ts.Node(mod.module, tparents, name if name is not None else mod.name)

    @property
    def name(self):
        return self._n.name

    def node(self, *nodes):
        return self.module.node(*nodes)


class Graph(Container):
    def __init__(self, inputs, outputs, unsafe=False, nodesOnly=False, name=None):
        ins = inputs if isinstance(inputs, list) else [inputs]
        outs = outputs if isinstance(outputs, list) else [outputs]
        super().__init__(ts.Graph(inputs=[n._n for n in ins], outputs=[n._n for n in outs], name=name), name)
        self.inputs, self.outputs = ins, outs
        seen, stack = set(), list(outs)
        while stack:
            n = stack.pop()
            if id(n) in seen:
                continue
            seen.add(id(n))
            self.modules[n.name] = n.module
            stack.extend(p[0] if isinstance(p, tuple) else p for p in n.parents)
        self.nodes = {n: m for n, m in self.modules.items()}
