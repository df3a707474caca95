public import Foundation

/// Decimal values as replicas store them: Foundation's `Decimal` (38 significant digits, exponents -128 to 127), in
/// one canonical text form, so that equal values store as equal bytes whatever their written form (`1.50` and `1.5`
/// are one value).
extension Decimal {
    private static let posix = Locale(identifier: "en_US_POSIX")

    /// The canonical text of this value: no trailing zeros after the point, no exponent, `NaN` for not a number.
    public var canonicalText: String {
        if isNaN { return "NaN" }
        // Parsing the description gives the normalized form (least significand), whose description is canonical.
        let normalized = Decimal(string: description, locale: Self.posix) ?? self
        return normalized.description
    }

    /// The value of a canonical text (as ``canonicalText`` writes it), or `nil` when `text` is not one.
    public init?(canonicalText text: String) {
        if text == "NaN" {
            self = .nan
            return
        }
        guard let value = Decimal(string: text, locale: Self.posix), !value.isNaN, value.description == text else {
            return nil
        }
        self = value
    }

    /// The value written in `text` (`123.45`, `-1e-3`), or `nil` when `text` is not a decimal number whole, or is out
    /// of `Decimal`'s range.
    public init?(parsing text: String) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.lowercased() == "nan" {
            self = .nan
            return
        }
        // Foundation parses a prefix ("12abc" as 12): the whole text must be a number, [sign] digits [. digits]
        // [e [sign] digits].
        // Past 38 significant digits Foundation drops digits: such text is refused, not stored inexactly.
        guard Self.isNumber(Array(trimmed.utf8)), Self.significantDigits(trimmed) <= 38,
            let value = Decimal(string: trimmed, locale: Self.posix), !value.isNaN
        else { return nil }
        self = value
    }

    /// The decimal nearest `double`, as its shortest decimal form writes it (`19.99` for the double nearest 19.99;
    /// Foundation's `Decimal(Double)` gives 19.98999999999999488 on Linux), or `nil` for a NaN, an infinity, or a
    /// double beyond `Decimal`'s range.
    public init?(nearest double: Double) {
        guard double.isFinite, let value = Decimal(string: "\(double)", locale: Self.posix), !value.isNaN else {
            return nil
        }
        self = value
    }

    /// The significant digits of number text: the digits before any exponent, without leading or trailing zeros.
    private static func significantDigits(_ text: String) -> Int {
        let mantissa = text.prefix { $0 != "e" && $0 != "E" }.filter(\.isNumber)
        let trimmed = mantissa.drop { $0 == "0" }.reversed().drop { $0 == "0" }
        return trimmed.count
    }

    private static func isNumber(_ bytes: [UInt8]) -> Bool {
        var index = 0
        func digits() -> Int {
            let start = index
            while index < bytes.count, bytes[index] >= 48, bytes[index] <= 57 { index += 1 }
            return index - start
        }
        if index < bytes.count, bytes[index] == 43 || bytes[index] == 45 { index += 1 }
        var count = digits()
        if index < bytes.count, bytes[index] == 46 {
            index += 1
            count += digits()
        }
        guard count > 0 else { return false }
        if index < bytes.count, bytes[index] == 101 || bytes[index] == 69 {
            index += 1
            if index < bytes.count, bytes[index] == 43 || bytes[index] == 45 { index += 1 }
            guard digits() > 0 else { return false }
        }
        return index == bytes.count
    }
}
