using System.Net;
using System.Security.Claims;
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

    public static bool IsLogged(string header, ISet<string> excluded) => !AlwaysExcluded.Contains(header) && !excluded.Contains(header);

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
            // The body and hash arrays are this request's own and never written again: wrapped, not copied.
            Body = UnsafeByteOperations.UnsafeWrap(body),
            ReceivedAtUnixMs = receivedAt.ToUnixTimeMilliseconds(),
            Endpoint = context.GetEndpoint()?.DisplayName ?? "",
            RemoteIp = context.Connection.RemoteIpAddress?.ToString() ?? "",
            RequestHash = UnsafeByteOperations.UnsafeWrap(requestHash),
            RequestHashVersion = RequestIdentity.CurrentVersion,
            CanHaveBody = context.Features.Get<IHttpRequestBodyDetectionFeature>()?.CanHaveBody ?? body.Length > 0,
        };

        var headers = request.Headers;
        record.Headers.Capacity = headers.Count;
        foreach (var (name, values) in headers)
        {
            if (IsLogged(name, excluded))
            {
                var header = new LoggedHeader { Name = name };
                header.Values.Capacity = values.Count; // most headers have one value: no default 8-slot array
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

    /// <summary>
    /// Builds the context a logged request replays in: request features from the record (what a replayed endpoint sees is
    /// exactly what was logged). <see cref="EndpointRunner"/> installs the logged body and the reply capture.
    /// </summary>
    /// <remarks>Runs for every replayed request, most of them in the first seconds after a start: optimized at once.</remarks>
    [System.Runtime.CompilerServices.MethodImpl(System.Runtime.CompilerServices.MethodImplOptions.AggressiveOptimization)]
    public static DefaultHttpContext CreateReplayContext(LoggedRequest record, IServiceProvider services)
    {
        var headers = new HeaderDictionary(record.Headers.Count);
        foreach (var header in record.Headers)
        {
            headers[header.Name] = header.Values.Count == 1 ? new StringValues(header.Values[0]) : new StringValues([.. header.Values]);
        }

        var features = new ReplayFeatures();
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
            Body = Stream.Null,
        });
        features.Set<IHttpRequestBodyDetectionFeature>(new BodyDetection(record.CanHaveBody));
        features.Set<IHttpResponseFeature>(new HttpResponseFeature());
        features.Set<IHttpResponseBodyFeature>(new StreamResponseBodyFeature(Stream.Null));
        features.Set<IHttpRequestLifetimeFeature>(UninterruptibleLifetime.Instance);
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
