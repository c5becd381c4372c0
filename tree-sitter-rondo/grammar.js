/**
 * @file Rondo workflows (`.rondo`): a grammar for editors (highlighting, folds, indents).
 *
 * grammar/rondo.pest is the language's one parser; this grammar follows it rule by rule
 * and parses what it accepts, the spellings it reports as mistakes included (`name: value`
 * for `=`, `&&`, `||`, `!`, `=` and `is` in comparisons, `'text'`). Line breaks are
 * blanks here: a statement never runs into the next one because nothing in Rondo is
 * written by putting two expressions side by side.
 */

/// <reference types="tree-sitter-cli/dsl" />
// @ts-check

const PREC = {
  or: 10,
  and: 20,
  // `not a == b` is `not (a == b)`; `not a and b` is `(not a) and b`.
  not: 25,
  compare: 30,
  coalesce: 40,
  add: 50,
  negate: 60,
  member: 70,
};

const commaSep1 = (rule) => seq(rule, repeat(seq(',', rule)));
const commaSep = (rule) => optional(commaSep1(rule));

module.exports = grammar({
  name: 'rondo',

  extras: ($) => [/\s/, $.comment],

  word: ($) => $.identifier,

  rules: {
    source_file: ($) => repeat($._item),

    _item: ($) =>
      choice(
        $.workflow_declaration,
        $.import_declaration,
        $.type_declaration,
        $.memory_declaration,
        $.provider_declaration,
        $.tool_declaration,
        $.environment_declaration,
        $.role_declaration,
        $.exit_declaration,
        $.route,
        $.artifact_declaration,
        $.test_declaration,
      ),

    // ---------- words and literals ----------

    comment: (_) =>
      token(choice(seq('//', /[^\n]*/), seq('/*', /[^*]*\*+([^/*][^*]*\*+)*/, '/'))),

    identifier: (_) => /[A-Za-z_][A-Za-z0-9_]*/,

    string: ($) =>
      seq(
        '"',
        repeat(choice($.string_content, $.escape_sequence)),
        token.immediate('"'),
      ),
    string_content: (_) => token.immediate(prec(1, /[^"\\\n]+/)),
    escape_sequence: (_) => token.immediate(/\\(.|\n)/),

    raw_string: (_) => /"""([^"]|"[^"]|""[^"])*"""/,

    // `'text'`: reported by `rondo check` (a string takes double quotes), read as meant.
    single_quoted_string: (_) => /'([^'\\\n]|\\.)*'/,

    _string: ($) => choice($.string, $.raw_string),

    number: (_) => /\d+(\.\d+)?/,
    signed_number: (_) => /-\d+(\.\d+)?/,
    duration: (_) => /\d+(\.\d+)?(ms|s|m|h)/,

    true: (_) => 'true',
    false: (_) => 'false',
    null: (_) => 'null',

    // ---------- declarations ----------

    workflow_declaration: ($) =>
      seq(
        'workflow',
        field('name', $.identifier),
        '{',
        repeat(choice($.input_declaration, $.answer_declaration, $.attribute)),
        '}',
      ),

    input_declaration: ($) =>
      seq(
        'input',
        field('name', $.identifier),
        ':',
        field('type', $._type),
        optional(seq('=', field('default', $._expression))),
      ),

    answer_declaration: ($) => seq('answer', '=', field('value', $._expression)),

    import_declaration: ($) =>
      seq('import', field('kind', choice('providers', 'tool')), field('path', $._string)),

    type_declaration: ($) =>
      seq(
        'type',
        field('name', $.identifier),
        choice(seq('=', field('type', $._type)), field('type', $.object_type)),
      ),

    memory_declaration: ($) => seq('memory', '{', repeat($.memory_entry), '}'),

    memory_entry: ($) =>
      seq(
        field('name', $.identifier),
        ':',
        choice(
          seq(field('kind', $.memory_kind), optional($.attribute_block)),
          seq(field('type', $._type), optional(seq('=', field('default', $._expression)))),
        ),
      ),

    memory_kind: (_) => choice('whiteboard', 'code_context', 'history', 'conversation'),

    provider_declaration: ($) =>
      seq('provider', field('name', $.identifier), $.attribute_block),

    environment_declaration: ($) =>
      seq('environment', field('name', $.identifier), $.attribute_block),

    tool_declaration: ($) =>
      seq(
        'tool',
        field('name', $.identifier),
        '{',
        repeat(choice($.tool_input, $.attribute)),
        '}',
      ),

    tool_input: ($) => seq('input', $.object_type),

    role_declaration: ($) =>
      seq(
        'role',
        field('name', $.identifier),
        ':',
        field('kind', $.identifier),
        '{',
        repeat(
          choice($.output_declaration, $.update_block, $.artifact_declaration, $.attribute),
        ),
        '}',
      ),

    output_declaration: ($) =>
      seq(
        'output',
        choice(
          seq(field('format', 'json'), field('type', $._type)),
          seq(field('format', 'tagged'), field('type', $._type)),
          field('format', 'text'),
          seq(field('format', 'code'), optional(field('language', $._string))),
        ),
      ),

    update_block: ($) =>
      seq('update', '{', repeat(choice($.set_statement, $.call_statement)), '}'),

    set_statement: ($) =>
      seq('set', field('name', $.identifier), '=', field('value', $._expression)),

    call_statement: ($) =>
      seq(
        field('target', $.identifier),
        '.',
        field('method', $.identifier),
        field('arguments', $.arguments),
      ),

    artifact_declaration: ($) =>
      seq(
        'artifact',
        field('name', $._string),
        field('operator', choice('=', '+=')),
        field('value', $._expression),
      ),

    exit_declaration: ($) =>
      seq(
        'exit',
        field('name', $.identifier),
        optional($.attribute_block),
        optional(seq('when', field('condition', $._expression))),
      ),

    // ---------- attributes ----------

    // `name = value`, or a nested block `name { ... }`. `name: value` is reported by
    // `rondo check` and read as meant.
    attribute: ($) =>
      seq(
        field('key', $.identifier),
        choice(seq(choice('=', ':'), field('value', $._value)), $.attribute_block),
      ),

    attribute_block: ($) => seq('{', repeat($.attribute), '}'),

    _value: ($) =>
      choice(
        $._string,
        $.single_quoted_string,
        $.number,
        $.signed_number,
        $.duration,
        $.true,
        $.false,
        $.null,
        $.value_path,
        $.value_call,
        $.list_value,
        $.map_value,
      ),

    value_path: ($) => seq($.identifier, repeat(seq('.', $.identifier))),

    value_call: ($) =>
      seq(
        field('function', $.identifier),
        '(',
        commaSep($._value),
        ')',
      ),

    list_value: ($) => seq('[', commaSep($._value), optional(','), ']'),

    map_value: ($) => seq('{', repeat(seq($.map_value_entry, optional(','))), '}'),

    map_value_entry: ($) =>
      seq(
        field('key', choice($.identifier, $.string)),
        choice('=', ':'),
        field('value', $._value),
      ),

    // ---------- types ----------

    _type: ($) => choice($.optional_type, $.union_type, $._type_atom),

    optional_type: ($) => seq(choice($.union_type, $._type_atom), '?'),

    union_type: ($) => prec.left(seq($._type_atom, repeat1(seq('|', $._type_atom)))),

    _type_atom: ($) =>
      choice(
        $.string,
        $.list_type,
        $.map_type,
        $.object_type,
        alias($.identifier, $.type_identifier),
      ),

    list_type: ($) => seq('list', '[', $._type, ']'),

    map_type: ($) => seq('map', '[', $._type, ']'),

    object_type: ($) =>
      seq('{', repeat(seq(choice($.field_declaration, $.type_attribute), optional(','))), '}'),

    // `extra = ignore`: an attribute of the object type itself (a field takes `:`).
    type_attribute: ($) => seq(field('key', $.identifier), '=', field('value', $._value)),

    field_declaration: ($) =>
      seq(field('name', $.identifier), ':', field('type', $._type)),

    // ---------- routes ----------

    route: ($) =>
      prec.right(
        seq(
          field('from', $.identifier),
          '->',
          field('to', choice($.identifier, $.parallel_target, $.map_target)),
          repeat(
            choice($.when_clause, $.otherwise, $.max_clause, $.backtrack),
          ),
        ),
      ),

    parallel_target: ($) =>
      seq(
        'parallel',
        '[',
        commaSep1(field('branch', $.identifier)),
        optional(','),
        ']',
        '->',
        field('join', $.identifier),
      ),

    map_target: ($) =>
      seq(
        'map',
        field('worker', $.identifier),
        'over',
        field('items', $._expression),
        '->',
        field('join', $.identifier),
      ),

    when_clause: ($) => seq('when', field('condition', $._expression)),
    otherwise: (_) => 'otherwise',
    max_clause: ($) => seq('max', field('bound', $.number)),
    backtrack: (_) => 'backtrack',

    // ---------- tests ----------

    test_declaration: ($) =>
      seq(
        'test',
        field('name', $._string),
        '{',
        repeat(
          choice(
            $.test_input,
            $.test_reply,
            $.expect_exit,
            $.expect_path,
            $.expect_artifact,
            $.expect_expression,
            $.attribute,
          ),
        ),
        '}',
      ),

    test_input: ($) =>
      seq('input', field('name', $.identifier), '=', field('value', $._expression)),

    test_reply: ($) =>
      seq(
        'reply',
        field('role', $.identifier),
        optional(seq('visit', field('visit', $.number))),
        '=',
        field('text', $._string),
      ),

    expect_exit: ($) => seq('expect', 'exit', field('exit', $.identifier)),

    expect_path: ($) =>
      seq('expect', 'path', '[', commaSep(field('step', $.identifier)), optional(','), ']'),

    expect_artifact: ($) =>
      seq(
        'expect',
        'artifact',
        field('name', $._string),
        optional(seq('contains', field('contains', $._string))),
      ),

    expect_expression: ($) => seq('expect', field('condition', $._expression)),

    // ---------- expressions ----------

    _expression: ($) =>
      choice($.binary_expression, $.unary_expression, $._primary_expression),

    binary_expression: ($) => {
      const table = [
        [PREC.or, choice('or', '||')],
        [PREC.and, choice('and', '&&')],
        [
          PREC.compare,
          choice('==', '!=', '<', '<=', '>', '>=', '=', 'is', seq('is', 'not')),
        ],
        [PREC.coalesce, '??'],
        [PREC.add, choice('+', '-')],
      ];
      return choice(
        ...table.map(([precedence, operator]) =>
          prec.left(
            precedence,
            seq(
              field('left', $._expression),
              field('operator', operator),
              field('right', $._expression),
            ),
          ),
        ),
      );
    },

    unary_expression: ($) =>
      choice(
        prec(PREC.not, seq(field('operator', choice('not', '!')), field('operand', $._expression))),
        prec(PREC.negate, seq(field('operator', '-'), field('operand', $._expression))),
      ),

    _primary_expression: ($) =>
      choice(
        $.identifier,
        $.member_expression,
        $.call_expression,
        $.number,
        $._string,
        $.single_quoted_string,
        $.true,
        $.false,
        $.null,
        $.list,
        $.map,
        $.parenthesized_expression,
      ),

    member_expression: ($) =>
      prec(
        PREC.member,
        seq(
          field('object', choice($.identifier, $.member_expression, $.call_expression)),
          '.',
          field('field', $.identifier),
        ),
      ),

    call_expression: ($) =>
      prec(
        PREC.member,
        seq(
          field('function', choice($.identifier, $.member_expression)),
          field('arguments', $.arguments),
        ),
      ),

    arguments: ($) => seq('(', commaSep($._expression), ')'),

    list: ($) => seq('[', commaSep($._expression), optional(','), ']'),

    map: ($) => seq('{', commaSep($.map_entry), optional(','), '}'),

    map_entry: ($) =>
      seq(field('key', choice($.identifier, $.string)), ':', field('value', $._expression)),

    parenthesized_expression: ($) => seq('(', $._expression, ')'),
  },
});
