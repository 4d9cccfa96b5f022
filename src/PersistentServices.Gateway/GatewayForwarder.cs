using System.Diagnostics;
using System.Net;
using System.Net.Http.Headers;
using System.Net.Sockets;
using System.Security.Cryptography;
using System.Text.Json;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Http.Features;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using PersistentServices.Http.IdempotencyKeys;
using Yarp.ReverseProxy.Forwarder;

namespace PersistentServices.Gateway;

/// <summary>
/// Forwards one client request to the instance that owns it with YARP's <see cref="IHttpForwarder"/>, and holds it while
/// that instance is unreachable or answers that it cannot serve it yet, resending it with the same identity
/// (docs/gateway.md, "Holding" and "The resend rule"). Keeps nothing beyond the request in flight.
/// </summary>
internal sealed class GatewayForwarder : IDisposable
{
    public const string SessionHeader = "PS-Session";
    public const string SequenceHeader = "PS-Seq";
    public const string InstanceHeader = "PS-Gateway-Instance";
    private const string ForwardedFor = "X-Forwarded-For";
    private const string ForwardedProto = "X-Forwarded-Proto";
    private const string ForwardedHost = "X-Forwarded-Host";
    private const string ForwardedPrefix = "X-Forwarded-Prefix";

    private readonly IHttpForwarder _forwarder;
    private readonly GatewayTopology _topology;
    private readonly PersistentGatewayOptions _options;
    private readonly TimeProvider _time;
    private readonly ILogger _logger;
    private readonly HttpMessageInvoker _client;
    private readonly ForwarderRequestConfig _requestConfig = new() { ActivityTimeout = TimeSpan.FromMinutes(2) };
    private readonly ForwarderRequestConfig _groupRequestConfig;
    private readonly BufferBudget _buffers;
    private readonly byte[]? _peerKey;

    public GatewayForwarder(IHttpForwarder forwarder, GatewayTopology topology, IOptions<PersistentGatewayOptions> options, TimeProvider time, ILogger<GatewayForwarder> logger)
    {
        _forwarder = forwarder;
        _topology = topology;
        _options = options.Value;
        _time = time;
        _logger = logger;
        _buffers = new BufferBudget(_options.MaxBufferedBytes, _options.EffectiveMaxBufferedBytesPerClient);
        _groupRequestConfig = new() { ActivityTimeout = _options.NodeResponseTimeout };
        _peerKey = _options.PeerKey is { } peerKey ? System.Text.Encoding.UTF8.GetBytes(peerKey) : null;
        _client = new HttpMessageInvoker(new SocketsHttpHandler
        {
            UseProxy = false,
            AllowAutoRedirect = false,
            AutomaticDecompression = DecompressionMethods.None,
            UseCookies = false,
            ConnectTimeout = _options.ConnectTimeout,
            EnableMultipleHttp2Connections = true,
            ActivityHeadersPropagator = new ReverseProxyPropagator(DistributedContextPropagator.Current),
        });
    }

    /// <summary>Bytes of request bodies kept right now (for tests and diagnostics).</summary>
    public long BufferedBytes => _buffers.Held;

    public void Dispose() => _client.Dispose();

    /// <summary>The paths of the services' control plane (<see cref="PersistentGatewayOptions.ForwardControlPlane"/>), each itself or anything under it, in any case.</summary>
    private static readonly string[] ControlPlane = ["/ps/replication", "/ps/consensus", "/ps/domain"];

    /// <summary>Whether <paramref name="path"/> (decoded, as routing sees it, empty segments dropped) is on the services' control plane.</summary>
    internal static bool IsControlPlane(string path)
    {
        while (path.Contains("//", StringComparison.Ordinal))
        {
            path = path.Replace("//", "/", StringComparison.Ordinal); // as a server might read an empty segment: fail closed
        }

        foreach (var prefix in ControlPlane)
        {
            if (path.StartsWith(prefix, StringComparison.OrdinalIgnoreCase) && (path.Length == prefix.Length || path[prefix.Length] == '/'))
            {
                return true;
            }
        }

        return false;
    }

    private static string Truncate(string path) => path.Length > 200 ? path[..200] : path;

    public async Task InvokeAsync(HttpContext context)
    {
        var request = context.Request;
        var (service, path) = _topology.Match(request.Path.Value ?? "/");
        if (!_options.ForwardControlPlane && (IsControlPlane(path) || IsControlPlane(request.Path.Value ?? "/")))
        {
            // Before anything else (the body is not read, nothing is sent): the path as the service would see it, and as the
            // client sent it, in any case (the services' routing ignores case).
            GatewayEvents.ControlPlaneRefused(_logger, request.Method, Truncate(request.Path.Value ?? "/"), context.Connection.RemoteIpAddress?.ToString() ?? "unknown");
            await ProblemAsync(context, 404, "gateway-control-plane", "Not reachable through the gateway",
                "Replication, consensus and service-domain endpoints (/ps/replication/*, /ps/consensus, /ps/domain/*) are for the deployment's own nodes and " +
                "operators, who reach the nodes directly; the gateway does not forward them (PersistentGatewayOptions.ForwardControlPlane).").ConfigureAwait(false);
            return;
        }

        if (service is null)
        {
            await ProblemAsync(context, 404, "gateway-no-service", "No service", $"No service behind the gateway has a path prefix that matches '{request.Path}'.").ConfigureAwait(false);
            return;
        }

        // The key as the service will read it (one parser for both): "K", K and " K " are one key, routed alike.
        var session = Single(request.Headers[SessionHeader]);
        var keySyntax = IdempotencyKeyHeader.Parse(request.Headers[IdempotencyKeyHeader.Name], IdempotencyKeyHeader.LongestKey, out var key);
        var route = service.Route(request.Method, path, session, keySyntax == IdempotencyKeyHeader.Syntax.Valid ? key : null);
        if (route.Placement == Placement.UnknownOwner)
        {
            var ordinal = GatewayService.OwnerOrdinal(session ?? path[(service.SessionsPath.Length + 1)..]) ?? 0;
            GatewayEvents.UnknownOwner(_logger, service.Name, ordinal);
            await ProblemAsync(context, 404, "session-not-found", "Session not found",
                $"The session names instance {ordinal} of service {service.Name}, which the gateway does not know (removed, or never configured).").ConfigureAwait(false);
            return;
        }

        // A request without an identity to a persistent endpoint gets one, so that its resend is exactly-once too. One the
        // service refuses as it is (a malformed key, PS-Seq without PS-Session) goes through unchanged: it gets its 400.
        var unsafeMethod = !IsSafe(request.Method);
        var malformed = keySyntax == IdempotencyKeyHeader.Syntax.Malformed || (session is null && request.Headers.ContainsKey(SequenceHeader));
        string? addedKey = null;
        if (route.Placement == Placement.Unkeyed && !malformed && unsafeMethod && service.HonoursIdentity(path))
        {
            addedKey = NewKey();
            route = new RouteDecision(Placement.Key, service.ForNewKey(addedKey));
        }

        // A key of the gateway's own (generated now, or one it generated before that the client resends after a 504) is
        // signed, so that the service keeps it apart from clients' own keys (docs/gateway.md, "Generated keys").
        var signedKey = addedKey ?? (route.Placement == Placement.Key && _peerKey is not null && unsafeMethod && service.HonoursIdentity(path) &&
                                     key!.StartsWith(GatewayKeySignature.KeyPrefix, StringComparison.Ordinal) ? key : null);

        if (request.ContentLength > _options.MaxRequestBodyBytes)
        {
            await TooLargeAsync(context).ConfigureAwait(false);
            return;
        }

        var client = context.Connection.RemoteIpAddress;
        var read = new BodyRead();
        try
        {
            try
            {
                await ReadBodyAsync(request, client, read, context.RequestAborted).ConfigureAwait(false);
            }
            catch (Exception ex) when (ex is BadHttpRequestException or IOException or OperationCanceledException)
            {
                return; // the client left, or sent its body too slowly (MinRequestBodyDataRate): Kestrel closes the connection
            }

            if (read.TooLarge)
            {
                await TooLargeAsync(context).ConfigureAwait(false);
                return;
            }

            switch (read.Refusal)
            {
                case BufferBudget.Refusal.Total:
                    GatewayEvents.BufferFull(_logger, _options.MaxBufferedBytes, request.Method, path);
                    context.Response.Headers.RetryAfter = "1";
                    await ProblemAsync(context, 503, "unavailable", "Gateway busy", "The gateway holds as many request bodies as it may; nothing was sent. Retry the same request.").ConfigureAwait(false);
                    return;
                case BufferBudget.Refusal.Client:
                    GatewayEvents.ClientBufferFull(_logger, _options.EffectiveMaxBufferedBytesPerClient, request.Method, path);
                    context.Response.Headers.RetryAfter = "1";
                    await ProblemAsync(context, 503, "unavailable", "Gateway busy for this client",
                        "The gateway holds as many request bodies from this client address as one client may (MaxBufferedBytesPerClient); nothing was sent. Retry the same request once an earlier one is answered.").ConfigureAwait(false);
                    return;
            }

            await HoldAsync(context, service, path, route, addedKey, signedKey, read.Body!, malformed).ConfigureAwait(false);
        }
        finally
        {
            _buffers.Return(client, read.Taken);
        }
    }

    private Task TooLargeAsync(HttpContext context)
        => ProblemAsync(context, 413, "body-too-large", "Request body too large", $"The gateway keeps bodies of at most {_options.MaxRequestBodyBytes} bytes; nothing was sent.");

    private async Task HoldAsync(HttpContext context, GatewayService service, string path, RouteDecision route, string? addedKey, string? signedKey, byte[] body, bool malformed)
    {
        var request = context.Request;
        var started = _time.GetTimestamp();
        var instance = route.Instance!;
        var hasSequence = request.Headers.ContainsKey(SequenceHeader);

        // May a request that may have executed be sent again? Only with an identity the service honours (docs/gateway.md):
        // the operator's statement (Persistent) covers the unsafe methods, so a GET is never resent once it may have run.
        var unsafeMethod = !IsSafe(request.Method);
        var resendable = !malformed && route.Placement switch
        {
            Placement.SessionStart => true, // starting a session executes nothing
            Placement.Session => hasSequence && unsafeMethod && service.HonoursIdentity(path),
            Placement.Key => unsafeMethod && service.HonoursIdentity(path),
            _ => false,
        };

        var delay = _options.RetryDelay;
        var nodesTried = 0;
        var mayHaveRun = false; // whether any send so far may have executed (then the hold ends in 504, not 503)
        for (var attempt = 1; ; attempt++)
        {
            if (body.Length > 0)
            {
                request.Body = new MemoryStream(body, writable: false);
            }
            var address = instance.Address;
            var transformer = new AttemptTransformer(path, service.PathPrefix, addedKey, signedKey, _peerKey, _time, instance.Ordinal);
            // A node of a replication group that keeps a request it may be sent again without a word is given up after
            // NodeResponseTimeout (a hung primary: its group promotes another node meanwhile).
            var group = resendable && instance.Nodes.Count > 1;
            var error = await _forwarder.SendAsync(context, address, _client, group ? _groupRequestConfig : _requestConfig, transformer).ConfigureAwait(false);
            string reason;
            if (transformer.Held is { } held)
            {
                reason = held;
                mayHaveRun |= transformer.Running;
                if (transformer.Replica && instance.NextNode(address) && ++nodesTried < instance.Nodes.Count)
                {
                    // A replica executed nothing: the next node of the group may be the primary; asked at once, once around.
                    GatewayEvents.Holding(_logger, request.Method, path, service.Name, instance.Ordinal, reason, 0);
                    ResetResponse(context);
                    continue;
                }
            }
            else if (error == ForwarderError.None || context.Response.HasStarted || context.RequestAborted.IsCancellationRequested)
            {
                if (attempt > 1)
                {
                    GatewayEvents.Released(_logger, request.Method, path, service.Name, instance.Ordinal, attempt, (long)_time.GetElapsedTime(started).TotalMilliseconds);
                }

                return; // answered (streamed to the client), or the client left, or a reply broke after it started
            }
            else
            {
                var exception = context.Features.Get<IForwarderErrorFeature>()?.Exception;
                if (NeverReached(error, exception))
                {
                    reason = "refused the connection";
                    if (route.Placement is Placement.SessionStart or Placement.Unkeyed)
                    {
                        instance = service.NextInstance(); // it never arrived anywhere: another instance may take it
                    }
                    else if (instance.NextNode(address) && ++nodesTried < instance.Nodes.Count)
                    {
                        // The node is down; another node of its replication group may be (or become) the primary.
                        GatewayEvents.Holding(_logger, request.Method, path, service.Name, instance.Ordinal, reason, 0);
                        ResetResponse(context);
                        continue;
                    }
                }
                else if (group && error == ForwarderError.RequestTimedOut)
                {
                    // Hung or slow: the request, with its identity, goes to the group's next node at once, once around; a node
                    // still executing it answers the resend when it is done (docs/protocol.md).
                    reason = $"no answer within NodeResponseTimeout ({(long)_options.NodeResponseTimeout.TotalMilliseconds} ms)";
                    mayHaveRun = true;
                    if (instance.NextNode(address) && ++nodesTried < instance.Nodes.Count)
                    {
                        GatewayEvents.Holding(_logger, request.Method, path, service.Name, instance.Ordinal, reason, 0);
                        ResetResponse(context);
                        continue;
                    }
                }
                else if (resendable)
                {
                    reason = $"lost the request ({error}: {exception?.GetBaseException().Message})";
                    mayHaveRun |= route.Placement != Placement.SessionStart;
                    if (route.Placement == Placement.SessionStart)
                    {
                        instance = service.NextInstance();
                    }
                }
                else
                {
                    GatewayEvents.NotResent(_logger, request.Method, path, service.Name, instance.Ordinal, error.ToString());
                    ResetResponse(context);
                    await ProblemAsync(context, 502, "gateway-outcome-unknown", "Outcome unknown",
                        "The instance may have executed this request, and it carries no identity the service honours, so the gateway did not send it again.").ConfigureAwait(false);
                    return;
                }
            }

            var elapsed = _time.GetElapsedTime(started);
            if (elapsed + delay > _options.HoldTime)
            {
                ResetResponse(context);
                await HoldExpiredAsync(context, service, path, instance.Ordinal, elapsed, reason, mayHaveRun, addedKey ?? (route.Placement == Placement.Key ? Single(request.Headers[IdempotencyKeyHeader.Name]) : null)).ConfigureAwait(false);
                return;
            }

            nodesTried = 0;
            GatewayEvents.Holding(_logger, request.Method, path, service.Name, instance.Ordinal, reason, (long)delay.TotalMilliseconds);
            ResetResponse(context);
            try
            {
                await Task.Delay(delay, _time, context.RequestAborted).ConfigureAwait(false);
            }
            catch (OperationCanceledException)
            {
                return; // the client left; nothing more is sent
            }

            delay = TimeSpan.FromTicks(Math.Min(delay.Ticks * 2, _options.MaxRetryDelay.Ticks));
        }
    }

    /// <summary>
    /// The answer after <see cref="PersistentGatewayOptions.HoldTime"/>: <c>503 unavailable</c> when no send can have run
    /// (refused connections, <c>503 unavailable</c> or <c>replica</c> answers), else <c>504 outcome-unknown</c> with the
    /// identity to resend under: the request may have run, and only a resend with that identity runs it at most once.
    /// </summary>
    private Task HoldExpiredAsync(HttpContext context, GatewayService service, string path, byte ordinal, TimeSpan elapsed, string reason, bool mayHaveRun, string? key)
    {
        var request = context.Request;
        var status = mayHaveRun ? 504 : 503;
        GatewayEvents.HoldExpired(_logger, request.Method, path, service.Name, ordinal, (long)elapsed.TotalMilliseconds, reason, status);
        if (key is not null)
        {
            context.Response.Headers[IdempotencyKeyHeader.Name] = key; // the identity to resend under: the service runs it once
        }

        if (!mayHaveRun)
        {
            context.Response.Headers.RetryAfter = "1";
            return ProblemAsync(context, 503, "unavailable", "Service unavailable",
                $"Instance {ordinal} of service {service.Name} did not serve the request within the gateway's hold time; it was not executed. Send it again.");
        }

        var identity = key is not null
            ? $"Idempotency-Key {key} (in this reply's Idempotency-Key header)"
            : $"the same {SessionHeader} and {SequenceHeader}";
        return ProblemAsync(context, 504, "outcome-unknown", "Outcome unknown",
            $"Instance {ordinal} of service {service.Name} may have executed the request, but did not answer within the gateway's hold time. " +
            $"Send the same request again with {identity}: it runs at most once, and the resend gets its reply. Without that identity a resend may run it twice.");
    }

    /// <summary>
    /// Whether the request provably never reached the instance: the TCP connection was never established (refused,
    /// unreachable). Anything else (a reset, a timeout, an early close) may have come after the instance read it.
    /// </summary>
    internal static bool NeverReached(ForwarderError error, Exception? exception)
    {
        if (error != ForwarderError.Request)
        {
            return false;
        }

        for (var e = exception; e is not null; e = e.InnerException)
        {
            if (e is HttpRequestException { HttpRequestError: HttpRequestError.ConnectionError } connect)
            {
                return connect.InnerException is SocketException { SocketErrorCode: SocketError.ConnectionRefused or SocketError.HostUnreachable or SocketError.NetworkUnreachable or SocketError.AddressNotAvailable };
            }
        }

        return false;
    }

    private static void ResetResponse(HttpContext context)
    {
        context.Features.Set<IForwarderErrorFeature>(null);
        context.Response.Clear();
    }

    /// <summary>What reading a body took from the budget, and what came of it.</summary>
    private sealed class BodyRead
    {
        public byte[]? Body { get; set; }

        /// <summary>Bytes taken from the budget (returned when the request is done, whatever happened).</summary>
        public long Taken { get; set; }

        public BufferBudget.Refusal Refusal { get; set; }

        public bool TooLarge { get; set; }
    }

    /// <summary>
    /// Reads the body whole, taking its bytes from the budget before they are kept: a declared <c>Content-Length</c> up front
    /// (refused before a byte is read), a body without one chunk by chunk as it arrives (refused at the first chunk over).
    /// </summary>
    private async Task ReadBodyAsync(HttpRequest request, IPAddress? client, BodyRead read, CancellationToken cancellationToken)
    {
        if (request.ContentLength == 0 || request.HttpContext.Features.Get<IHttpRequestBodyDetectionFeature>() is { CanHaveBody: false })
        {
            read.Body = []; // a GET without a body: nothing to keep (and nothing to read)
            return;
        }

        if (request.ContentLength is { } length)
        {
            if ((read.Refusal = _buffers.TryTake(client, length)) != BufferBudget.Refusal.None)
            {
                return;
            }

            read.Taken = length;
            var body = new byte[length];
            var at = 0;
            int n;
            while (at < body.Length && (n = await request.Body.ReadAsync(body.AsMemory(at), cancellationToken).ConfigureAwait(false)) > 0)
            {
                at += n;
            }

            read.Body = at == body.Length ? body : body[..at];
            return;
        }

        using var buffer = new MemoryStream();
        var chunk = System.Buffers.ArrayPool<byte>.Shared.Rent(16 * 1024);
        try
        {
            int n;
            while ((n = await request.Body.ReadAsync(chunk, cancellationToken).ConfigureAwait(false)) > 0)
            {
                if (buffer.Length + n > _options.MaxRequestBodyBytes)
                {
                    read.TooLarge = true;
                    return;
                }

                if ((read.Refusal = _buffers.TryTake(client, n)) != BufferBudget.Refusal.None)
                {
                    return;
                }

                read.Taken += n;
                buffer.Write(chunk, 0, n);
            }
        }
        finally
        {
            System.Buffers.ArrayPool<byte>.Shared.Return(chunk);
        }

        read.Body = buffer.ToArray();
    }

    private static bool IsSafe(string method)
        => HttpMethods.IsGet(method) || HttpMethods.IsHead(method) || HttpMethods.IsOptions(method) || HttpMethods.IsTrace(method);

    private static string? Single(Microsoft.Extensions.Primitives.StringValues values) => values.Count == 1 ? values[0] : values.Count == 0 ? null : values.ToString();

    private static string NewKey()
    {
        Span<byte> bytes = stackalloc byte[16];
        RandomNumberGenerator.Fill(bytes);
        return GatewayKeySignature.KeyPrefix + System.Buffers.Text.Base64Url.EncodeToString(bytes);
    }

    internal static Task ProblemAsync(HttpContext context, int status, string type, string title, string detail)
    {
        context.Response.StatusCode = status;
        context.Response.ContentType = "application/problem+json";
        return context.Response.WriteAsync(JsonSerializer.Serialize(new Dictionary<string, object>
        {
            ["type"] = "urn:persistentservices:problem:" + type,
            ["title"] = title,
            ["status"] = status,
            ["detail"] = detail,
        }), context.RequestAborted);
    }

    /// <summary>
    /// One send: the path without the service's prefix, the added key if any, and the <c>X-Forwarded-*</c> headers set
    /// (replacing any the client sent, as YARP's default transforms do) so the service sees the client's address for its
    /// per-address shares; a reply that says "not yet" (503 <c>unavailable</c> or <c>reply-pending</c>, 409
    /// <c>idempotency-key-in-use</c>) is kept from the client.
    /// </summary>
    private sealed class AttemptTransformer(string path, string prefix, string? addedKey, string? signedKey, byte[]? peerKey, TimeProvider time, byte ordinal) : HttpTransformer
    {
        private const int MaxProblemBytes = 16 * 1024;

        /// <summary>Why the reply was held back (null: it went to the client).</summary>
        public string? Held { get; private set; }

        /// <summary>The node answered that it is a replica (it executed nothing; another node of its group is the primary).</summary>
        public bool Replica { get; private set; }

        /// <summary>The held answer says the request ran or is running (<c>reply-pending</c>, <c>idempotency-key-in-use</c>).</summary>
        public bool Running { get; private set; }

        public override async ValueTask TransformRequestAsync(HttpContext httpContext, HttpRequestMessage proxyRequest, string destinationPrefix, CancellationToken cancellationToken)
        {
            await base.TransformRequestAsync(httpContext, proxyRequest, destinationPrefix, cancellationToken).ConfigureAwait(false);
            proxyRequest.RequestUri = RequestUtilities.MakeDestinationAddress(destinationPrefix, new PathString(path), httpContext.Request.QueryString);
            if (addedKey is not null)
            {
                proxyRequest.Headers.TryAddWithoutValidation(IdempotencyKeyHeader.Name, addedKey);
            }

            proxyRequest.Headers.Remove(GatewayKeySignature.Header); // only the gateway vouches for a key, never a client
            if (signedKey is not null && peerKey is not null)
            {
                // What the service sees as PathBase + Path + QueryString (decoded, as Kestrel gives them).
                var basePath = Uri.UnescapeDataString(new Uri(destinationPrefix).AbsolutePath).TrimEnd('/');
                proxyRequest.Headers.TryAddWithoutValidation(GatewayKeySignature.Header, GatewayKeySignature.Sign(
                    peerKey, time.GetUtcNow().ToUnixTimeMilliseconds(), httpContext.Request.Method, basePath + path + httpContext.Request.QueryString.Value, signedKey));
            }

            SetForwarded(httpContext, proxyRequest, prefix);
        }

        public override async ValueTask<bool> TransformResponseAsync(HttpContext httpContext, HttpResponseMessage? proxyResponse, CancellationToken cancellationToken)
        {
            if (proxyResponse is { StatusCode: HttpStatusCode.ServiceUnavailable or HttpStatusCode.Conflict } &&
                proxyResponse.Content.Headers.ContentType?.MediaType == "application/problem+json" &&
                proxyResponse.Content.Headers.ContentLength is null or <= MaxProblemBytes)
            {
                // A problem's body is small: read it (at most MaxProblemBytes + 1 bytes) to learn its type.
                var stream = await proxyResponse.Content.ReadAsStreamAsync(cancellationToken).ConfigureAwait(false);
                var buffer = new byte[MaxProblemBytes + 1];
                var length = 0;
                int read;
                while (length < buffer.Length && (read = await stream.ReadAsync(buffer.AsMemory(length), cancellationToken).ConfigureAwait(false)) > 0)
                {
                    length += read;
                }

                var type = length <= MaxProblemBytes ? ProblemType(buffer.AsSpan(0, length)) : null;
                if (type is "urn:persistentservices:problem:unavailable" or "urn:persistentservices:problem:reply-pending"
                    or "urn:persistentservices:problem:idempotency-key-in-use" or "urn:persistentservices:problem:replica")
                {
                    Held = "answered " + type["urn:persistentservices:problem:".Length..];
                    Replica = type == "urn:persistentservices:problem:replica";
                    Running = type is "urn:persistentservices:problem:reply-pending" or "urn:persistentservices:problem:idempotency-key-in-use";
                    return false;
                }

                // Any other problem goes to the client as it came.
                await base.TransformResponseAsync(httpContext, proxyResponse, cancellationToken).ConfigureAwait(false);
                Stamp(httpContext);
                await httpContext.Response.Body.WriteAsync(buffer.AsMemory(0, length), cancellationToken).ConfigureAwait(false);
                await stream.CopyToAsync(httpContext.Response.Body, cancellationToken).ConfigureAwait(false);
                return false;
            }

            var copy = await base.TransformResponseAsync(httpContext, proxyResponse, cancellationToken).ConfigureAwait(false);
            if (proxyResponse is not null)
            {
                Stamp(httpContext);
            }

            return copy;
        }

        /// <summary>The instance that answered, and the key the gateway generated (so that the client can resend under it).</summary>
        private void Stamp(HttpContext httpContext)
        {
            httpContext.Response.Headers[InstanceHeader] = ordinal.ToString(System.Globalization.CultureInfo.InvariantCulture);
            if (addedKey is not null)
            {
                httpContext.Response.Headers[IdempotencyKeyHeader.Name] = addedKey;
            }
        }

        /// <summary>
        /// <c>X-Forwarded-For</c> (the client's address), <c>-Proto</c>, <c>-Host</c> and, for a service with a path prefix,
        /// <c>-Prefix</c>, each set to what this hop saw; a client's own <c>Forwarded</c> and <c>X-Forwarded-*</c> are dropped,
        /// so a service that trusts the gateway (<c>UseForwardedHeaders</c> with its network known) trusts nothing a client wrote.
        /// </summary>
        internal static void SetForwarded(HttpContext context, HttpRequestMessage proxyRequest, string prefix)
        {
            var headers = proxyRequest.Headers;
            headers.Remove("Forwarded");
            headers.Remove(ForwardedFor);
            headers.Remove(ForwardedProto);
            headers.Remove(ForwardedHost);
            headers.Remove(ForwardedPrefix);
            if (context.Connection.RemoteIpAddress is { } address)
            {
                headers.TryAddWithoutValidation(ForwardedFor, address.IsIPv4MappedToIPv6 ? address.MapToIPv4().ToString() : address.ToString());
            }

            headers.TryAddWithoutValidation(ForwardedProto, context.Request.Scheme);
            if (context.Request.Host.HasValue)
            {
                headers.TryAddWithoutValidation(ForwardedHost, context.Request.Host.Value);
            }

            if (prefix.Length > 0)
            {
                headers.TryAddWithoutValidation(ForwardedPrefix, prefix);
            }
        }

        private static string? ProblemType(ReadOnlySpan<byte> bytes)
        {
            try
            {
                var reader = new Utf8JsonReader(bytes);
                using var document = JsonDocument.ParseValue(ref reader);
                return document.RootElement.ValueKind == JsonValueKind.Object && document.RootElement.TryGetProperty("type", out var type) && type.ValueKind == JsonValueKind.String
                    ? type.GetString()
                    : null;
            }
            catch (JsonException)
            {
                return null;
            }
        }
    }
}
