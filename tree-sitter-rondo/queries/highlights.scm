; Rondo highlights. Capture names follow nvim-treesitter's; docs/editors.md says which
; ones Helix spells otherwise.

(comment) @comment

[
  "workflow"
  "import"
  "type"
  "memory"
  "provider"
  "environment"
  "tool"
  "role"
  "exit"
  "test"
  "input"
  "answer"
  "output"
  "update"
  "set"
  "artifact"
  "reply"
  "visit"
  "expect"
  "path"
  "contains"
] @keyword

[
  "when"
  (otherwise)
  "max"
  (backtrack)
  "parallel"
  "map"
  "over"
] @keyword.control

[
  "and"
  "or"
  "not"
  "is"
] @keyword.operator

(import_declaration kind: _ @keyword)
(output_declaration format: _ @keyword)
(memory_kind) @type.builtin

[
  "->"
  "="
  "+="
  "=="
  "!="
  "<"
  "<="
  ">"
  ">="
  "+"
  "-"
  "??"
  "|"
  "?"
  "&&"
  "||"
  "!"
] @operator

["{" "}" "[" "]" "(" ")"] @punctuation.bracket
["," "." ":"] @punctuation.delimiter

(string) @string
(raw_string) @string
(single_quoted_string) @string
(escape_sequence) @string.escape

(number) @number
(signed_number) @number
(duration) @number
[(true) (false)] @boolean
(null) @constant.builtin

; Declarations
(workflow_declaration name: (identifier) @module)
(role_declaration name: (identifier) @function)
(role_declaration kind: (identifier) @type.builtin)
(exit_declaration name: (identifier) @constant)
(provider_declaration name: (identifier) @label)
(environment_declaration name: (identifier) @label)
(tool_declaration name: (identifier) @label)
(type_declaration name: (identifier) @type.definition)
(test_declaration name: _ @string.special)

; Types
(type_identifier) @type
((type_identifier) @type.builtin
  (#any-of? @type.builtin "string" "int" "float" "bool" "any" "path" "workspace_path"))
(list_type "list" @type.builtin)
(map_type "map" @type.builtin)
(field_declaration name: (identifier) @property)

; Routes: the nodes of the graph
(route from: (identifier) @function)
(route to: (identifier) @function)
((route from: (identifier) @function.builtin)
  (#eq? @function.builtin "start"))
(parallel_target branch: (identifier) @function)
(parallel_target join: (identifier) @function)
(map_target worker: (identifier) @function)
(map_target join: (identifier) @function)
(expect_exit exit: (identifier) @constant)
(expect_path step: (identifier) @function)
(test_reply role: (identifier) @function)

; Attributes and memory
(attribute key: (identifier) @property)
(type_attribute key: (identifier) @property)
(map_value_entry key: (identifier) @property)
(map_entry key: (identifier) @property)
(memory_entry name: (identifier) @variable.member)
(input_declaration name: (identifier) @variable.parameter)
(test_input name: (identifier) @variable.parameter)
(set_statement name: (identifier) @variable.member)
(call_statement target: (identifier) @variable.member)
(call_statement method: (identifier) @function.method.call)

; Expressions
(call_expression function: (identifier) @function.call)
(value_call function: (identifier) @function.call)
(member_expression field: (identifier) @property)
((identifier) @variable.builtin
  (#any-of? @variable.builtin "memory" "input" "output" "item" "round"))
