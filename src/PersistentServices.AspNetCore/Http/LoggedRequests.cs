using System.Net;
using System.Security.Claims;
using System.Security.Cryptography;
using System.Text;
using Google.Protobuf;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Http.Features;
using Microsoft.Extensions.Primitives;
using PersistentServices.Log.Records;
using PersistentServices.Sessions;

namespace PersistentServices.Http;

/// <summary>
/// Turns a live request into its log record, and a log record back into a request to replay (the way ASP.NET's
/// TestServer builds contexts). What is logged is exactly what a replayed endpoint sees.
/// </summary>
internal static class LoggedRequests
{
    private static readonly HashSet<string> AlwaysExcluded = new(StringComparer.OrdinalIgnoreCase)
    {
        "Authorization", "Proxy-Authorization", "Cookie",
    };

    /// <summary>
    /// Logs the short reply record of a request (status and hash, not the body: a replay recomputes it) and makes it the
    /// session's state number. Not forced: the caller waits until it is durable before anyone receives the reply.
    /// </summary>
    public static long AppendReply(Log.DurableLog log, Session session, LoggedPosition position, BufferedReply reply)
    {
        var lsn = log.Append(RecordKind.Reply, new ReplySent
        {
            SessionId = session.IdBytes,
            Sequence = position.Sequence,
            StatusCode = reply.StatusCode,
            ReplyHash = ByteString.CopyFrom(reply.Hash),
            RequestLsn = position.RequestLsn,
        });
        session.StateNumber = lsn;
        return lsn;
    }

    public static bool IsLogged(string header, ISet<string> excluded) => !AlwaysExcluded.Contains(header) && !excluded.Contains(header);

    /// <summary>SHA-256 of method, path, query and body: identifies "the same request" for retries of a sequence number.</summary>
    public static byte[] Hash(string method, string path, string query, ReadOnlySpan<byte> body)
    {
        var head = $"{method}\n{path}\n{query}\n";
        var headLength = Encoding.UTF8.GetByteCount(head);
        var rented = System.Buffers.ArrayPool<byte>.Shared.Rent(headLength + body.Length);
        try
        {
            var buffer = rented.AsSpan(0, headLength + body.Length);
            Encoding.UTF8.GetBytes(head, buffer);
            body.CopyTo(buffer[headLength..]);
            return SHA256.HashData(buffer);
        }
        finally
        {
            System.Buffers.ArrayPool<byte>.Shared.Return(rented);
        }
    }

    public static LoggedRequest Create(HttpContext context, ByteString sessionBytes, long sequence, byte[] body, byte[] requestHash, DateTimeOffset receivedAt, ISet<string> excluded)
    {
        var request = context.Request;
        var record = new LoggedRequest
        {
            SessionId = sessionBytes,
            Sequence = sequence,
            Method = request.Method,
            Scheme = request.Scheme,
            Host = request.Host.Value ?? "",
            PathBase = request.PathBase.Value ?? "",
            Path = request.Path.Value ?? "",
            QueryString = request.QueryString.Value ?? "",
            Body = ByteString.CopyFrom(body),
            ReceivedAtUnixMs = receivedAt.ToUnixTimeMilliseconds(),
            Endpoint = context.GetEndpoint()?.DisplayName ?? "",
            RemoteIp = context.Connection.RemoteIpAddress?.ToString() ?? "",
            RequestHash = ByteString.CopyFrom(requestHash),
            CanHaveBody = context.Features.Get<IHttpRequestBodyDetectionFeature>()?.CanHaveBody ?? body.Length > 0,
        };

        foreach (var (name, values) in request.Headers)
        {
            if (IsLogged(name, excluded))
            {
                var header = new LoggedHeader { Name = name };
                foreach (var value in values)
                {
                    header.Values.Add(value ?? "");
                }

                record.Headers.Add(header);
            }
        }

        if (context.User.Identity is { IsAuthenticated: true } identity)
        {
            var principal = new LoggedPrincipal
            {
                AuthenticationType = identity.AuthenticationType ?? "",
                NameClaimType = (identity as ClaimsIdentity)?.NameClaimType ?? ClaimsIdentity.DefaultNameClaimType,
                RoleClaimType = (identity as ClaimsIdentity)?.RoleClaimType ?? ClaimsIdentity.DefaultRoleClaimType,
            };
            foreach (var claim in context.User.Claims)
            {
                principal.Claims.Add(new LoggedClaim { Type = claim.Type, Value = claim.Value, ValueType = claim.ValueType, Issuer = claim.Issuer });
            }

            record.User = principal;
        }

        return record;
    }

    /// <summary>The identifier a session is bound to: SHA-256 of the principal's id claim, or empty when anonymous.</summary>
    public static byte[] OwnerOf(ClaimsPrincipal user)
    {
        if (user.Identity is not { IsAuthenticated: true } identity)
        {
            return [];
        }

        var id = user.FindFirst(ClaimTypes.NameIdentifier)?.Value ?? user.FindFirst("sub")?.Value ?? identity.Name;
        return id is null ? [] : SHA256.HashData(Encoding.UTF8.GetBytes("principal:" + id));
    }

    /// <summary>Builds the context a logged request replays in: request features from the record, a capture for the reply.</summary>
    public static DefaultHttpContext CreateReplayContext(LoggedRequest record, ResponseCapture capture, IServiceProvider services)
    {
        var body = record.Body.ToByteArray();
        var headers = new HeaderDictionary();
        foreach (var header in record.Headers)
        {
            headers[header.Name] = new StringValues([.. header.Values]);
        }

        var features = new FeatureCollection();
        features.Set<IHttpRequestFeature>(new HttpRequestFeature
        {
            Protocol = "HTTP/1.1",
            Method = record.Method,
            Scheme = record.Scheme,
            PathBase = record.PathBase,
            Path = record.Path,
            QueryString = record.QueryString,
            RawTarget = record.PathBase + record.Path + record.QueryString,
            Headers = headers,
            Body = new MemoryStream(body, writable: false),
        });
        features.Set<IHttpRequestBodyDetectionFeature>(new BodyDetection(record.CanHaveBody));
        features.Set<IRequestBodyPipeFeature>(new LoggedBodyPipe(body));
        capture.Install(features);
        features.Set<IHttpRequestLifetimeFeature>(new UninterruptibleLifetime());
        features.Set<IHttpConnectionFeature>(new HttpConnectionFeature
        {
            RemoteIpAddress = IPAddress.TryParse(record.RemoteIp, out var ip) ? ip : null,
        });
        features.Set<IServiceProvidersFeature>(new ServiceProvidersFeature { RequestServices = services });

        var context = new DefaultHttpContext(features);
        context.Request.Host = HostString.FromUriComponent(record.Host);
        context.User = record.User is { } user
            ? new ClaimsPrincipal(new ClaimsIdentity(
                user.Claims.Select(c => new Claim(c.Type, c.Value, c.ValueType, c.Issuer)),
                user.AuthenticationType,
                user.NameClaimType,
                user.RoleClaimType))
            : new ClaimsPrincipal(new ClaimsIdentity());
        return context;
    }

    private sealed class BodyDetection(bool canHaveBody) : IHttpRequestBodyDetectionFeature
    {
        public bool CanHaveBody { get; } = canHaveBody;
    }
}
