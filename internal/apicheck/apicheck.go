package apicheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/constant"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
)

// Load type-checks the packages named by patterns (as `go list` takes
// them, run in dir) from the compiler's export data and returns them by
// import path. Patterns that match no Go files are an error.
func Load(dir string, patterns ...string) (map[string]*types.Package, error) {
	args := append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}\t{{.DepOnly}}"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	exports := map[string]string{}
	var roots []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("go list: unexpected line %q", sc.Text())
		}
		exports[f[0]] = f[1]
		if f[2] == "false" {
			roots = append(roots, f[0])
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %q", path)
		}
		return os.Open(file)
	})
	pkgs := map[string]*types.Package{}
	for _, path := range roots {
		pkg, err := imp.Import(path)
		if err != nil {
			return nil, fmt.Errorf("importing %s: %w", path, err)
		}
		pkgs[path] = pkg
	}
	return pkgs, nil
}

// Counts are a package's exported identifiers by kind.
type Counts struct {
	Types, Funcs, Methods, Fields, Consts, Vars int
}

// Total is the number of exported identifiers.
func (c Counts) Total() int { return c.Types + c.Funcs + c.Methods + c.Fields + c.Consts + c.Vars }

func (c Counts) String() string {
	return fmt.Sprintf("%d identifiers (%d types, %d funcs, %d methods, %d fields, %d consts, %d vars)",
		c.Total(), c.Types, c.Funcs, c.Methods, c.Fields, c.Consts, c.Vars)
}

// API returns the exported API of pkg in the manner of Go's api/ files,
// one sorted line per exported identifier:
//
//	pkg P, const Name Type = value
//	pkg P, var Name Type
//	pkg P, func Name(Params) Results
//	pkg P, type Name struct
//	pkg P, type Name struct, Field Type
//	pkg P, type Name struct, embedded Type
//	pkg P, type Name interface { M1, M2 }
//	pkg P, type Name interface, M1(Params) Results
//	pkg P, type Name Underlying
//	pkg P, type Name = Aliased
//	pkg P, method (Receiver) Name(Params) Results
//
// Types are written without parameter names, and qualified by package
// name, except pkg's own.
func API(pkg *types.Package) ([]string, Counts) {
	w := &writer{pkg: pkg}
	prefix := "pkg " + pkg.Path() + ", "
	var lines []string
	var n Counts
	add := func(s string) { lines = append(lines, prefix+s) }
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			n.Consts++
			typ := w.typ(obj.Type())
			if b, ok := obj.Type().(*types.Basic); ok && b.Info()&types.IsUntyped != 0 {
				typ = "ideal-" + strings.TrimPrefix(b.Name(), "untyped ")
			}
			add(fmt.Sprintf("const %s %s = %s", name, typ, value(obj.Val())))
		case *types.Var:
			n.Vars++
			add(fmt.Sprintf("var %s %s", name, w.typ(obj.Type())))
		case *types.Func:
			n.Funcs++
			sig := obj.Type().(*types.Signature)
			add(fmt.Sprintf("func %s%s%s", name, w.typeParams(sig.TypeParams()), w.signature(sig)))
		case *types.TypeName:
			n.Types++
			n.add(w.typeName(obj, add))
		}
	}
	sort.Strings(lines)
	return lines, n
}

func (n *Counts) add(m Counts) {
	n.Methods += m.Methods
	n.Fields += m.Fields
}

func value(v constant.Value) string {
	if v.Kind() == constant.Float {
		return v.String()
	}
	return v.ExactString()
}

type writer struct{ pkg *types.Package }

func (w *writer) qualifier(p *types.Package) string {
	if p == w.pkg {
		return ""
	}
	return p.Name()
}

// typeName writes the lines of a type: its own, its fields or interface
// methods, and its methods; it returns the count of the last two.
func (w *writer) typeName(obj *types.TypeName, add func(string)) Counts {
	var n Counts
	name := obj.Name()
	if obj.IsAlias() {
		add(fmt.Sprintf("type %s = %s", name, w.typ(obj.Type())))
		return n
	}
	named, ok := obj.Type().(*types.Named)
	if !ok {
		add(fmt.Sprintf("type %s %s", name, w.typ(obj.Type())))
		return n
	}
	head := name + w.typeParams(named.TypeParams())
	switch u := named.Underlying().(type) {
	case *types.Struct:
		add(fmt.Sprintf("type %s struct", head))
		for i := range u.NumFields() {
			f := u.Field(i)
			switch {
			case f.Embedded() && exportedEmbed(f.Type()):
				n.Fields++
				add(fmt.Sprintf("type %s struct, embedded %s", head, w.typ(f.Type())))
			case !f.Embedded() && f.Exported():
				n.Fields++
				add(fmt.Sprintf("type %s struct, %s %s", head, f.Name(), w.typ(f.Type())))
			}
		}
	case *types.Interface:
		var names []string
		for i := range u.NumMethods() {
			m := u.Method(i)
			if !m.Exported() {
				names = append(names, "unexported methods")
				continue
			}
			n.Methods++
			names = append(names, m.Name())
			add(fmt.Sprintf("type %s interface, %s%s", head, m.Name(), w.signature(m.Type().(*types.Signature))))
		}
		for i := range u.NumEmbeddeds() {
			names = append(names, w.typ(u.EmbeddedType(i)))
		}
		names = dedup(names)
		add(fmt.Sprintf("type %s interface { %s }", head, strings.Join(names, ", ")))
	default:
		add(fmt.Sprintf("type %s %s", head, w.typ(u)))
	}
	for i := range named.NumMethods() {
		m := named.Method(i)
		if !m.Exported() {
			continue
		}
		n.Methods++
		sig := m.Type().(*types.Signature)
		recv := name
		if tps := sig.RecvTypeParams(); tps.Len() > 0 {
			var ps []string
			for j := range tps.Len() {
				ps = append(ps, tps.At(j).Obj().Name())
			}
			recv += "[" + strings.Join(ps, ", ") + "]"
		}
		if _, ptr := sig.Recv().Type().(*types.Pointer); ptr {
			recv = "*" + recv
		}
		add(fmt.Sprintf("method (%s) %s%s", recv, m.Name(), w.signature(sig)))
	}
	return n
}

func exportedEmbed(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := t.(interface{ Obj() *types.TypeName }); ok {
		return n.Obj().Exported()
	}
	return true
}

func dedup(s []string) []string {
	sort.Strings(s)
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func (w *writer) typeParams(tps *types.TypeParamList) string {
	if tps.Len() == 0 {
		return ""
	}
	var ps []string
	for i := range tps.Len() {
		tp := tps.At(i)
		ps = append(ps, tp.Obj().Name()+" "+w.typ(tp.Constraint()))
	}
	return "[" + strings.Join(ps, ", ") + "]"
}

// signature writes (Params) Results, without names.
func (w *writer) signature(sig *types.Signature) string {
	var ps []string
	for i := range sig.Params().Len() {
		t := sig.Params().At(i).Type()
		if sig.Variadic() && i == sig.Params().Len()-1 {
			ps = append(ps, "..."+w.typ(t.(*types.Slice).Elem()))
			continue
		}
		ps = append(ps, w.typ(t))
	}
	s := "(" + strings.Join(ps, ", ") + ")"
	switch r := sig.Results(); r.Len() {
	case 0:
	case 1:
		s += " " + w.typ(r.At(0).Type())
	default:
		var rs []string
		for i := range r.Len() {
			rs = append(rs, w.typ(r.At(i).Type()))
		}
		s += " (" + strings.Join(rs, ", ") + ")"
	}
	return s
}

// typ writes t; function types without parameter names, so that renaming
// a parameter is no API change.
func (w *writer) typ(t types.Type) string {
	switch t := t.(type) {
	case *types.Pointer:
		return "*" + w.typ(t.Elem())
	case *types.Slice:
		return "[]" + w.typ(t.Elem())
	case *types.Array:
		return fmt.Sprintf("[%d]%s", t.Len(), w.typ(t.Elem()))
	case *types.Map:
		return "map[" + w.typ(t.Key()) + "]" + w.typ(t.Elem())
	case *types.Chan:
		switch t.Dir() {
		case types.SendOnly:
			return "chan<- " + w.typ(t.Elem())
		case types.RecvOnly:
			return "<-chan " + w.typ(t.Elem())
		}
		return "chan " + w.typ(t.Elem())
	case *types.Signature:
		return "func" + w.signature(t)
	case *types.Named:
		s := w.name(t.Obj())
		if args := t.TypeArgs(); args.Len() > 0 {
			var as []string
			for i := range args.Len() {
				as = append(as, w.typ(args.At(i)))
			}
			s += "[" + strings.Join(as, ", ") + "]"
		}
		return s
	case *types.Alias:
		s := w.name(t.Obj())
		if args := t.TypeArgs(); args.Len() > 0 {
			var as []string
			for i := range args.Len() {
				as = append(as, w.typ(args.At(i)))
			}
			s += "[" + strings.Join(as, ", ") + "]"
		}
		return s
	}
	return types.TypeString(t, w.qualifier)
}

func (w *writer) name(obj *types.TypeName) string {
	if obj.Pkg() == nil || obj.Pkg() == w.pkg {
		return obj.Name()
	}
	return obj.Pkg().Name() + "." + obj.Name()
}
