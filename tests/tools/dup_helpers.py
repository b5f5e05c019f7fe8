#!/usr/bin/python3
"""Helper functions defined in more than one file under tests/ (issue 41:
a test helper is written once, in a shared fixture, and used from there).

C: every function defined at file scope in tests/unit, tests/fuzz and
tests/compile (static or not, in subfolders too) but the test cases
themselves (test_*). Python: every module-level def in tests/**/*.py,
and the methods of its classes but a unittest class's own (test_*,
setUp, tearDown, ...), dunder methods (protocol names) and overrides of
a base class's method (one interface, each class its own). Methods are
listed as TestCase.<name> (of a unittest class, its helpers) or
class.<name> (of a helper class).

Names in ALLOWED are defined in several files on purpose (each is that
file's own behaviour under a name the harness or an interface fixes);
names in KNOWN are duplicates not yet shared, reported; anything else
defined in more than one file fails.

Usage: dup_helpers.py [--all] [tests-dir]
  --all   list the allowed names too.
Exit status 1 where a name in neither is defined in more than one file.
"""
import ast
import os
import re
import sys

# Same name, different behaviour by design: fixed by what calls them.
_LIFECYCLE = "each helper class's own (a fake peer, a process, a cluster)"
ALLOWED = {
    'main': 'one per program',
    'class.close': _LIFECYCLE, 'class.run': _LIFECYCLE, 'class.send': _LIFECYCLE,
    'class.start': _LIFECYCLE, 'class.stop': _LIFECYCLE,
    # The same wait on the master, each fixture reading its status its own
    # way: psb from the test's network, mh from inside a namespace host.
    'TestCase.status': "the master's status: psb's network or a namespace host's (mh)",
    'TestCase.wait_phase': "the wait on the master's phase: psb's network or a namespace host's (mh)",
}
# Known, not yet shared (reported, not failing): none left (the tests'
# masters and results readers are psb.PsbTestCase's, issue 41).
KNOWN = {}

UNITTEST_HOOKS = {'setUp', 'tearDown', 'setUpClass', 'tearDownClass',
                  'setUpModule', 'tearDownModule', 'run', 'id',
                  'shortDescription', 'addCleanup', 'doCleanups'}
C_DIRS = ('unit', 'fuzz', 'compile')
C_NOT_FUNCS = {'if', 'for', 'while', 'switch', 'return', 'sizeof', 'do'}


def strip_c(src):
    """Comments, strings and character constants blanked (newlines kept),
    preprocessor lines removed."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == '/' and src.startswith('/*', i):
            j = src.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append('\n' * src.count('\n', i, j))
            i = j
        elif c == '/' and src.startswith('//', i):
            j = src.find('\n', i)
            i = n if j < 0 else j
        elif c in '"\'':
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == '\\' else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    text = ''.join(out)
    # Preprocessor lines (with continuations) hold no definitions here.
    return re.sub(r'(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*', '', text)


FUNC_HEAD = re.compile(r'([A-Za-z_]\w*)\s*\((?:[^()]|\([^()]*\))*\)\s*$')


def c_functions(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        text = strip_c(f.read())
    names = []
    depth, start = 0, 0
    for i, c in enumerate(text):
        if c == '{':
            if depth == 0:
                head = text[start:i]
                m = FUNC_HEAD.search(head)
                if m and '=' not in head and m.group(1) not in C_NOT_FUNCS:
                    names.append(m.group(1))
            depth += 1
        elif c == '}':
            depth -= 1
            if depth == 0:
                start = i + 1
        elif c == ';' and depth == 0:
            start = i + 1
    return names


def base_names(cls):
    return [b.attr if isinstance(b, ast.Attribute) else getattr(b, 'id', '') for b in cls.bases]


def py_classes(paths):
    """Every class of the Python files: name -> (bases, method names).
    Classes are told apart by name alone (the tests' classes have distinct
    names, and a base is named as defined, maybe through its module)."""
    classes = {}
    for p in paths:
        with open(p, encoding='utf-8') as f:
            tree = ast.parse(f.read(), p)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                methods = {m.name for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
                classes[node.name] = (base_names(node), methods)
    return classes


def ancestors(name, classes, seen=None):
    seen = set() if seen is None else seen
    for b in classes.get(name, ((), ()))[0]:
        if b not in seen:
            seen.add(b)
            ancestors(b, classes, seen)
    return seen


def extends(func):
    """Whether method func calls the one it overrides (super().NAME(...)
    or Base.NAME(self, ...)): one helper, extended."""
    for n in ast.walk(func):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == func.name:
            base = n.func.value
            if isinstance(base, ast.Call) and getattr(base.func, 'id', '') == 'super':
                return True
            if isinstance(base, (ast.Name, ast.Attribute)) and getattr(base, 'id', '') != 'self':
                return True
    return False


def py_functions(path, classes):
    """Module-level functions, and the methods of its classes that are
    helpers: not a unittest hook or test, not a dunder, not an override
    of a base class's method (one interface, each class its own) but a
    unittest class's helper that a test class defines again without
    calling it (a shared fixture's helper, say psb.PsbTestCase.master,
    written twice)."""
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append(node.name)
        elif isinstance(node, ast.ClassDef):
            up = ancestors(node.name, classes)
            test_case = 'TestCase' in up
            inherited = set()
            for a in up:
                inherited |= classes.get(a, ((), set()))[1]
            # The helpers of the unittest classes among its bases (a shared
            # fixture's): defined again, they are defined twice.
            shared = set()
            for a in up:
                if 'TestCase' in ancestors(a, classes):
                    shared |= classes.get(a, ((), set()))[1]
            for m in node.body:
                if not isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if m.name.startswith('__') and m.name.endswith('__'):
                    continue
                if m.name in inherited and not (test_case and m.name in shared and not extends(m)):
                    continue
                if test_case and (m.name.startswith('test') or m.name in UNITTEST_HOOKS):
                    continue
                names.append('%s.%s' % ('TestCase' if test_case else 'class', m.name))
    return names


def survey(root):
    defs = {}
    for d in C_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            for fn in sorted(files):
                if fn.endswith(('.c', '.h')):
                    p = os.path.join(dirpath, fn)
                    for name in c_functions(p):
                        if name.startswith('test_'):
                            continue  # a cmocka test case, not a helper
                        defs.setdefault(('c', name), set()).add(os.path.relpath(p, root))
    py = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ('node_modules', '__pycache__')]
        py += [os.path.join(dirpath, fn) for fn in sorted(files) if fn.endswith('.py')]
    classes = py_classes(py)
    for p in py:
        for name in py_functions(p, classes):
            defs.setdefault(('py', name), set()).add(os.path.relpath(p, root))
    return {k: v for k, v in defs.items() if len(v) > 1}


def main(argv):
    show_all = '--all' in argv
    args = [a for a in argv if a != '--all']
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    dups = survey(root)
    bad = 0
    for (lang, name), files in sorted(dups.items()):
        why = ALLOWED.get(name)
        known = KNOWN.get(name)
        if why and not show_all:
            continue
        note = '  (allowed: %s)' % why if why else '  (known, left: %s)' % known if known else ''
        bad += not why and not known
        print('%-3s %-32s %s%s' % (lang, name, ' '.join(sorted(files)), note))
    if bad:
        print('%d helper name(s) defined in more than one file' % bad)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
