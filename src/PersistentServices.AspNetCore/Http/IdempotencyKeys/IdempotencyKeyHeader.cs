using System.Text;
using Microsoft.Extensions.Primitives;

namespace PersistentServices.Http.IdempotencyKeys;

/// <summary>
/// The syntax of the <c>Idempotency-Key</c> request header (docs/client.md, "Idempotency-Key"), in one place: the service
/// reads keys with it (<c>IdempotencyKey</c>), and the gateway compiles this same file (linked into
/// PersistentServices.Gateway) to route each key by the key the service will see, whatever its spelling.
/// </summary>
internal static class IdempotencyKeyHeader
{
    /// <summary>The header's name.</summary>
    public const string Name = "Idempotency-Key";

    /// <summary>The longest key any service accepts (the upper bound of <c>IdempotencyKeyOptions.MaxKeyLength</c>).</summary>
    public const int LongestKey = 1024;

    /// <summary>What the header holds.</summary>
    public enum Syntax
    {
        Absent,
        Valid,
        Malformed,
    }

    /// <summary>
    /// Reads the header's values: one value, either a structured-field string (<c>"…"</c>, as the IETF draft specifies) or a
    /// bare token (what most clients send), 1 to <paramref name="maxLength"/> printable ASCII characters (0x20–0x7E, the
    /// characters of a structured-field string), surrounding spaces ignored. <paramref name="key"/> is the key itself: the
    /// same for <c>K</c>, <c>"K"</c> and <c> K </c>.
    /// </summary>
    public static Syntax Parse(StringValues values, int maxLength, out string? key)
    {
        key = null;
        if (values.Count == 0)
        {
            return Syntax.Absent;
        }

        if (values.Count != 1 || values[0] is not { } raw || Unquote(raw.Trim()) is not { } value || value.Length == 0 || value.Length > maxLength)
        {
            return Syntax.Malformed;
        }

        foreach (var c in value)
        {
            if (c is < (char)0x20 or > (char)0x7E)
            {
                return Syntax.Malformed;
            }
        }

        key = value;
        return Syntax.Valid;
    }

    /// <summary>The sf-string's content (escapes <c>\"</c> and <c>\\</c>), or the text itself when it is not quoted; null when malformed.</summary>
    private static string? Unquote(string text)
    {
        if (text.Length == 0 || text[0] != '"')
        {
            // A bare key: no quote, and no comma (a comma outside quotes separates list members: "a, b" on one line is two
            // values, refused as on two lines).
            return text.Contains('"', StringComparison.Ordinal) || text.Contains(',', StringComparison.Ordinal) ? null : text;
        }

        if (text.Length < 2 || text[^1] != '"')
        {
            return null;
        }

        var builder = new StringBuilder(text.Length);
        for (var i = 1; i < text.Length - 1; i++)
        {
            var c = text[i];
            if (c == '\\')
            {
                if (++i >= text.Length - 1 || text[i] is not ('"' or '\\'))
                {
                    return null;
                }

                builder.Append(text[i]);
            }
            else if (c == '"')
            {
                return null;
            }
            else
            {
                builder.Append(c);
            }
        }

        return builder.ToString();
    }
}
