; Rondo indents (nvim-treesitter's captures): a block's body, a list's items and a
; call's arguments one level in; the closing bracket back; a """ string left as written.
[
  (workflow_declaration)
  (memory_declaration)
  (tool_declaration)
  (role_declaration)
  (test_declaration)
  (update_block)
  (attribute_block)
  (object_type)
  (list_value)
  (map_value)
  (list)
  (map)
  (arguments)
  (parallel_target)
  (expect_path)
] @indent.begin

[
  "}"
  "]"
  ")"
] @indent.branch @indent.end

[
  (raw_string)
  (comment)
] @indent.ignore

; A condition broken after an operator continues one level in.
(when_clause) @indent.begin
