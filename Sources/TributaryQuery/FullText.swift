import TributaryModel

// `TEXT`: full-text search, as Realm's: a string matches when it holds every word searched for (`cake`), a word that
// starts with each prefix searched for (`choc*`), and none of the words excluded (`-nuts`). Words are runs of letters
// and digits, compared without case or diacritics.

/// The words of `text` as full-text search compares them: runs of letters and digits (a soft hyphen inside a word is
/// dropped), lowercased, without diacritics.
func fullTextWords(_ text: String) -> [String] {
    var words: [String] = []
    var word = String.UnicodeScalarView()
    for scalar in fold(text, [.caseInsensitive, .diacriticInsensitive]).unicodeScalars {
        if scalar == "\u{AD}" { continue }
        if scalar.properties.isAlphabetic || scalar.properties.numericType != nil {
            word.append(scalar)
        } else if !word.isEmpty {
            words.append(String(word))
            word = String.UnicodeScalarView()
        }
    }
    if !word.isEmpty { words.append(String(word)) }
    return words
}

/// What a `TEXT` search asks for, from its text: words separated by spaces, each required, or excluded when written
/// with a leading `-`, and a prefix when written with a trailing `*`. A search of excluded words alone matches every
/// string without them.
struct FullTextTerms: Hashable, Sendable {
    var required: Set<String> = []
    var requiredPrefixes: [String] = []
    var excluded: Set<String> = []
    var excludedPrefixes: [String] = []

    /// The terms of `search`, or `nil` when it holds no word to search for.
    init?(_ search: String) {
        for chunk in search.split(whereSeparator: { $0.isWhitespace }) {
            var text = Substring(chunk)
            let excluding = text.hasPrefix("-")
            if excluding { text = text.dropFirst() }
            let prefix = text.hasSuffix("*")
            if prefix { text = text.dropLast() }
            let words = fullTextWords(String(text))
            for (index, word) in words.enumerated() {
                let isPrefix = prefix && index == words.count - 1
                switch (excluding, isPrefix) {
                case (false, false): required.insert(word)
                case (false, true): requiredPrefixes.append(word)
                case (true, false): excluded.insert(word)
                case (true, true): excludedPrefixes.append(word)
                }
            }
        }
        if required.isEmpty && requiredPrefixes.isEmpty && excluded.isEmpty && excludedPrefixes.isEmpty { return nil }
    }

    /// Whether `text` holds every required word and prefix and no excluded one.
    func matches(_ text: String) -> Bool {
        let words = Set(fullTextWords(text))
        return required.isSubset(of: words) && excluded.isDisjoint(with: words)
            && requiredPrefixes.allSatisfy { prefix in words.contains { $0.hasPrefix(prefix) } }
            && !excludedPrefixes.contains { prefix in words.contains { $0.hasPrefix(prefix) } }
    }
}

extension TypeChecker {
    /// Checks `path TEXT 'words'`: the path leads to strings, and the search holds a word to look for.
    func checkFullText(_ syntax: SyntaxComparison) throws(QueryError) -> FullTextSearch {
        let source = sourceText(syntax.left.start, syntax.left.end)
        let subject = variable == nil ? "'\(root.name).\(source)'" : "'\(source)'"
        guard case .keyPath(let components) = syntax.left.kind else {
            throw error(
                .typeMismatch, "TEXT searches a string property's words, but its left side is \(source)",
                at: syntax.left.start)
        }
        let (path, base) = try resolve(components, text: source)
        guard path.operation == nil, base == .scalar(.string) else {
            throw error(
                .typeMismatch, "TEXT searches a string property's words, but \(subject) is not a string",
                at: syntax.left.start)
        }
        try checkQuantifier(
            syntax.quantifier, before: subject, isMany: path.isToMany, at: syntax.quantifierPosition)
        let search: Value
        switch syntax.right.kind {
        case .literal(let literal):
            search = literal.value
        case .argument(let index, let placeholder):
            search = try argument(index, placeholder: placeholder, at: syntax.right.start)
        default:
            search = .null
        }
        guard syntax.rightQuantifier == nil, case .string(let text) = search else {
            throw error(
                .typeMismatch, "TEXT takes the words to search for as a string, as in description TEXT 'cake -nuts'",
                at: syntax.right.start)
        }
        guard let terms = FullTextTerms(text) else {
            throw error(
                .invalidLiteral,
                "TEXT needs at least one word to search for: letters or digits, as in description TEXT 'cake'",
                at: syntax.right.start)
        }
        return FullTextSearch(path: path, terms: terms, quantifier: syntax.quantifier ?? .anyElement)
    }
}
