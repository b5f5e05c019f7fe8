#!/usr/bin/python3
"""Helper functions defined in more than one file under tests/ (issue 41:
a test helper is written once, in a shared fixture, and used from there).

C: every function defined at file scope in tests/unit, tests/fuzz and
tests/compile (static or not) but the test cases themselves (test_*). Python: every module-level def in
tests/**/*.py, and the methods of its classes except a unittest class's
own (setUp*, tearDown*, test_*, its hooks) and dunder methods, which are
protocol names rather than helpers.

Names listed in ALLOWED are defined in several files on purpose (each is
that file's own, different behaviour under a name the protocol or the
harness fixes); anything else defined twice is reported.

Usage: dup_helpers.py [--all] [tests-dir]
  --all   report every name defined in more than one file, allowed or not.
Exit status 1 where a name outside ALLOWED is defined in more than one file.
"""
import ast
import os
import re
import sys

# Same name, different behaviour by design: fixed by what calls them.
ALLOWED = {
    # cmocka's entry point, one per test program.
    'main': 'one per test program',
    # The mock servers' and mock master/node's request handlers: the
    # message loop of each mock calls them; each answers as its mock must.
    # (Filled in below after the survey where such names exist.)
}

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


def is_test_case(cls):
    for b in cls.bases:
        name = b.attr if isinstance(b, ast.Attribute) else getattr(b, 'id', '')
        if name.endswith('TestCase') or name.endswith('Test') or name == 'Base':
            return True
    return False


def py_functions(path):
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append(node.name)
        elif isinstance(node, ast.ClassDef):
            test_case = is_test_case(node)
            for m in node.body:
                if not isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if m.name.startswith('__') and m.name.endswith('__'):
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
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ('node_modules', '__pycache__')]
        for fn in sorted(files):
            if fn.endswith('.py'):
                p = os.path.join(dirpath, fn)
                for name in py_functions(p):
                    defs.setdefault(('py', name), set()).add(os.path.relpath(p, root))
    return {k: v for k, v in defs.items() if len(v) > 1}


def main(argv):
    show_all = '--all' in argv
    args = [a for a in argv if a != '--all']
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
    dups = survey(root)
    bad = 0
    for (lang, name), files in sorted(dups.items()):
        bare = name.split('.')[-1]
        allowed = bare in ALLOWED
        if allowed and not show_all:
            continue
        bad += not allowed
        print('%-3s %-32s %s%s' % (lang, name, ' '.join(sorted(files)),
                                   '  (allowed: %s)' % ALLOWED[bare] if allowed else ''))
    if bad:
        print('%d helper name(s) defined in more than one file' % bad)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
