package problem

import (
	"encoding/json"
	"fmt"
	htmltemplate "html/template"
	"io"
	"mime"
	"strings"
	"text/template"
	"text/template/parse"
)

// An errors template's values are escaped for its content type (DESIGN.md,
// Hardening), so that no value — a client's request ID above all — can
// change the body's structure:
//
//   - JSON (application/json, *+json): every action's output is
//     JSON-string-escaped ("<", ">" and "&" as \u escapes too), so
//     "{{.RequestID}}" between quotes is safe without json; an action that
//     ends in json already yields JSON and is left alone;
//   - HTML (text/html): the template is an html/template, which escapes
//     each value for its context;
//   - XML (*/xml, *+xml): every action's output has <>&'" escaped as
//     character references;
//   - anything else (text/plain) is written as the template makes it.

// escaping is how a template's actions are escaped.
type escaping uint8

const (
	escapeNone escaping = iota
	escapeJSON
	escapeHTML
	escapeXML
)

// escapingOf returns the escaping of the media type contentType.
func escapingOf(contentType string) (escaping, error) {
	mt, _, err := mime.ParseMediaType(contentType)
	switch {
	case err != nil:
		return escapeNone, err
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return escapeJSON, nil
	case mt == "text/html":
		return escapeHTML, nil
	case strings.HasSuffix(mt, "/xml") || strings.HasSuffix(mt, "+xml"):
		return escapeXML, nil
	}
	return escapeNone, nil
}

// The escapers' names, called by the actions the parse tree is given.
const (
	jsonEscaper = "idemgate_escape_json"
	xmlEscaper  = "idemgate_escape_xml"
)

var funcs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	jsonEscaper: escapeJSONString,
	xmlEscaper:  escapeXMLString,
}

// escapeJSONString returns v's text as the inside of a JSON string.
func escapeJSONString(v any) string {
	b, _ := json.Marshal(fmt.Sprint(v)) // a string always marshals
	return string(b[1 : len(b)-1])
}

// escapeXMLString returns v's text with <>&'" (and NUL) escaped.
func escapeXMLString(v any) string {
	return template.HTMLEscapeString(fmt.Sprint(v))
}

// executor is a parsed text/template or html/template.
type executor interface {
	Execute(w io.Writer, data any) error
}

// parseEscaped parses text as the template name, escaped as e says.
func parseEscaped(name, text string, e escaping) (executor, error) {
	if e == escapeHTML {
		return htmltemplate.New(name).Funcs(htmltemplate.FuncMap(funcs)).Option("missingkey=error").Parse(text)
	}
	t, err := template.New(name).Funcs(funcs).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, err
	}
	switch e {
	case escapeJSON:
		escapeActions(t, jsonEscaper)
	case escapeXML:
		escapeActions(t, xmlEscaper)
	}
	return t, nil
}

// escapeActions makes every action of t's templates that writes output
// end in the escaper fn, as html/template does with its own escapers.
func escapeActions(t *template.Template, fn string) {
	for _, tt := range t.Templates() {
		if tt.Tree != nil && tt.Root != nil {
			escapeNode(tt.Tree, tt.Root, fn)
		}
	}
}

func escapeNode(tree *parse.Tree, n parse.Node, fn string) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			escapeNode(tree, c, fn)
		}
	case *parse.ActionNode:
		p := n.Pipe
		if len(p.Decl) > 0 || len(p.Cmds) == 0 {
			return // {{$x := ...}} writes nothing
		}
		if fn == jsonEscaper && endsIn(p, "json") {
			return // already JSON
		}
		id := parse.NewIdentifier(fn).SetTree(tree).SetPos(n.Pos)
		p.Cmds = append(p.Cmds, &parse.CommandNode{NodeType: parse.NodeCommand, Pos: n.Pos, Args: []parse.Node{id}})
	case *parse.IfNode:
		escapeNode(tree, n.List, fn)
		escapeNode(tree, n.ElseList, fn)
	case *parse.RangeNode:
		escapeNode(tree, n.List, fn)
		escapeNode(tree, n.ElseList, fn)
	case *parse.WithNode:
		escapeNode(tree, n.List, fn)
		escapeNode(tree, n.ElseList, fn)
	}
}

// endsIn reports whether the pipeline's last command calls the function
// name.
func endsIn(p *parse.PipeNode, name string) bool {
	last := p.Cmds[len(p.Cmds)-1]
	id, ok := last.Args[0].(*parse.IdentifierNode)
	return ok && id.Ident == name
}
