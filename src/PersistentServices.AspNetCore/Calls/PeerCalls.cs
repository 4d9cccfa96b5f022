using System.Security.Claims;
using Microsoft.AspNetCore.Http;
using PersistentServices.Hosting;
using PersistentServices.Http;

namespace PersistentServices.Calls;

/// <summary>
/// The callee's side of calls between the deployment's services (docs/calls.md): recognizes a request another service's
/// persistent request sent (<c>PS-Caller</c>), verifies its signature, and makes the calling service the request's
/// principal, so the session it calls on (derived from the caller's session) belongs to that service only. A DI singleton
/// (<see cref="RequestAdmission"/> verifies with it); the principal is a function of the caller's name only, so static.
/// </summary>
internal sealed class PeerCalls(PersistentRuntime runtime)
{
    public const string AuthenticationType = "PersistentServices.Peer";
    public const string Issuer = "PersistentServices.Peer";

    /// <summary>The calling service's principal: what replay restores and what owns the sessions it calls on.</summary>
    public static ClaimsPrincipal Principal(string caller)
        => new(new ClaimsIdentity([new Claim(ClaimTypes.NameIdentifier, caller, ClaimValueTypes.String, Issuer), new Claim(ClaimTypes.Name, caller, ClaimValueTypes.String, Issuer)], AuthenticationType));

    /// <summary>
    /// For a request with <c>PS-Caller</c>: verifies its signature over <paramref name="body"/>, made for this service
    /// (<see cref="PeerAuthentication"/>). Returns the caller's name, or null for a request from a client (no
    /// <c>PS-Caller</c>). <paramref name="error"/> says why a signed call is refused.
    /// </summary>
    public string? Verify(HttpContext context, ReadOnlySpan<byte> body, out string? error)
    {
        error = null;
        var request = context.Request;
        if (request.Headers[ProtocolHeaders.Caller] is not [{ Length: > 0 } caller])
        {
            return null;
        }

        error = runtime.Peers.Verify(
            request.Headers[ProtocolHeaders.Signature].ToString() is { Length: > 0 } signature ? signature : null,
            new PeerMessage(
                request.Method,
                request.Path.Value + request.QueryString.Value,
                caller,
                request.Headers[ProtocolHeaders.Callee].ToString(),
                request.Headers[ProtocolHeaders.Session].ToString(),
                request.Headers[ProtocolHeaders.Sequence].ToString(),
                request.Headers[ProtocolHeaders.Role].ToString(),
                request.Headers[ProtocolHeaders.Dv].ToString(),
                request.Headers.ContentType.ToString()),
            body);
        return error is null ? caller : null;
    }
}
