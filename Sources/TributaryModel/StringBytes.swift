import Foundation

extension String {
    /// Whether two strings have the same UTF-8 bytes: how a replica tells stored strings apart. Swift's `==` calls
    /// "é" as one scalar and as "e" with a combining accent equal; these are different bytes.
    public func hasSameUTF8(as other: String) -> Bool {
        let count = utf8.count
        guard count == other.utf8.count else { return false }
        if count == 0 { return true }
        let compared = utf8.withContiguousStorageIfAvailable { left in
            other.utf8.withContiguousStorageIfAvailable { right in
                memcmp(left.baseAddress!, right.baseAddress!, count) == 0
            }
        }
        if let compared = compared ?? nil { return compared }
        return utf8.elementsEqual(other.utf8)
    }

    /// Whether the string's UTF-8 bytes sort before `other`'s: the order of their Unicode scalars, as a replica stores
    /// keys.
    public func utf8Precedes(_ other: String) -> Bool {
        let (leftCount, rightCount) = (utf8.count, other.utf8.count)
        let common = Swift.min(leftCount, rightCount)
        let compared = utf8.withContiguousStorageIfAvailable { left in
            other.utf8.withContiguousStorageIfAvailable { right -> Int32 in
                common == 0 ? 0 : memcmp(left.baseAddress!, right.baseAddress!, common)
            }
        }
        if let order = compared ?? nil { return order != 0 ? order < 0 : leftCount < rightCount }
        return utf8.lexicographicallyPrecedes(other.utf8)
    }
}
