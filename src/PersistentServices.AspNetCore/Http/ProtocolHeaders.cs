using System.Globalization;
using Microsoft.AspNetCore.Http;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>The wire protocol's headers (docs/protocol.md).</summary>
internal static class ProtocolHeaders
{
    /// <summary>The session id: 22 base64url characters (128 random bits).</summary>
    public const string Session = "PS-Session";

    /// <summary>The request's sequence number in its session: 1, 2, 3, …</summary>
    public const string Sequence = "PS-Seq";

    /// <summary>On a reply: "true" when it is the buffered reply of an earlier execution.</summary>
    public const string Replayed = "PS-Replayed";

    /// <summary>On a call from another of the deployment's services: the calling service's name (docs/calls.md).</summary>
    public const string Caller = "PS-Caller";

    /// <summary>On a call: the caller's component role; on a reply: the callee's (persistent, functional, read-only).</summary>
    public const string Role = "PS-Role";

    /// <summary>Inside a service domain: the sender's dependency vector on a call or a reply (docs/domains.md).</summary>
    public const string Dv = "PS-DV";

    /// <summary>
    /// Inside a service domain, on a <c>409 orphan-message</c> reply: the recovered state number the refused message's DV
    /// depends on beyond (<c>Service=epoch.lsn</c>), so the sender learns it and rolls back (docs/domains.md).
    /// </summary>
    public const string Orphan = "PS-Orphan";

    /// <summary>On a call from another of the deployment's services: the called service's name, covered by the signature (docs/calls.md).</summary>
    public const string Callee = "PS-Callee";

    /// <summary>On a call: its signature with the deployment's peer key (<c>t=&lt;unix ms&gt;,v2=&lt;hex&gt;</c>).</summary>
    public const string Signature = "PS-Signature";

    /// <summary>On an error about sequence numbers: the number the service expects next.</summary>
    public const string ExpectedSequence = "PS-Expected-Seq";

    /// <summary>Parses the session header; <paramref name="error"/> says what is wrong when it is present but malformed.</summary>
    public static bool TryGetSession(HttpRequest request, out SessionId id, out bool present, out string? error)
    {
        id = default;
        error = null;
        var values = request.Headers[Session];
        present = values.Count > 0;
        if (!present)
        {
            return false;
        }

        if (values.Count != 1 || !SessionId.TryParse(values[0], out id))
        {
            error = $"The {Session} header must be one session id of {SessionId.TextLength} base64url characters, as returned when the session was started.";
            return false;
        }

        return true;
    }

    /// <summary>Parses the sequence header: a single decimal integer from 1.</summary>
    public static bool TryGetSequence(HttpRequest request, out long sequence, out string? error)
    {
        sequence = 0;
        error = null;
        var values = request.Headers[Sequence];
        if (values.Count != 1 || values[0] is not { Length: > 0 and <= 19 } text ||
            !long.TryParse(text, NumberStyles.None, CultureInfo.InvariantCulture, out sequence) || sequence < 1)
        {
            error = $"The {Sequence} header must be one decimal request number from 1: the session's first request is 1, each new request adds 1, a retry repeats the number.";
            return false;
        }

        return true;
    }
}
