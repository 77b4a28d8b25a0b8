/// Parameters of HTTP header values (RFC 9110 §5.6.6), for multipart bodies and downloads alike.
public enum HeaderParameter {
    /// A parameter of a header value such as `multipart/form-data; boundary="x"` or
    /// `form-data; name="file"; filename="a;b \"c\".mov"`: a quoted value may hold `;` and backslash escapes.
    public static func value(_ name: String, in value: String) -> String? {
        var characters = value.drop { $0 != ";" }
        while characters.first == ";" {
            characters = characters.dropFirst()
            let key = characters.prefix { $0 != "=" && $0 != ";" }
            characters = characters.dropFirst(key.count)
            guard characters.first == "=" else { continue }
            characters = characters.dropFirst().drop { $0 == " " || $0 == "\t" }
            var text = ""
            if characters.first == "\"" {
                characters = characters.dropFirst()
                while let character = characters.first, character != "\"" {
                    characters = characters.dropFirst()
                    if character == "\\", let escaped = characters.first {
                        text.append(escaped)
                        characters = characters.dropFirst()
                    } else {
                        text.append(character)
                    }
                }
                characters = characters.dropFirst().drop { $0 != ";" } // the closing quote, and anything up to the next
            } else {
                text = String(characters.prefix { $0 != ";" }).trimmingCharacters(in: .whitespaces)
                characters = characters.drop { $0 != ";" }
            }
            if key.trimmingCharacters(in: .whitespaces).lowercased() == name.lowercased() { return text }
        }
        return nil
    }
}
