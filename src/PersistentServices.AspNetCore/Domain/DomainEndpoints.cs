using System.Globalization;
using System.Text;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Routing;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using PersistentServices.Diagnostics;
using PersistentServices.Hosting;
using PersistentServices.Http;

namespace PersistentServices.Domain;

/// <summary>
/// The domain's control endpoints, answered only to members (signed with the peer key): a distributed flush's local part
/// (<c>POST /ps/domain/flush</c>, body <c>epoch.lsn</c>: 200 once durable, 409 with the recovered LSN when that state
/// was lost), and recovered state numbers (<c>POST</c> to tell, <c>GET</c> to ask, <c>/ps/domain/recovered</c>). Every
/// refusal is a problem details reply, logged (event 1109): 401 for a message not signed by a member, 400 for a malformed
/// one or one about state this service never had, 405 for another method.
/// </summary>
internal static class DomainEndpoints
{
    private const int MaxBody = 64 * 1024;

    public static void Map(IEndpointRouteBuilder endpoints)
    {
        endpoints.MapPost(ServiceDomain.FlushPath, FlushAsync).WithDisplayName("PersistentServices: domain flush");
        endpoints.MapPost(ServiceDomain.RecoveredPath, TellAsync).WithDisplayName("PersistentServices: domain recovered state numbers (tell)");
        endpoints.MapGet(ServiceDomain.RecoveredPath, AskAsync).WithDisplayName("PersistentServices: domain recovered state numbers (ask)");

        // Any other method: 405 with problem details (the routing's own 405 has no body), as for the session resource.
        endpoints.Map(ServiceDomain.FlushPath, MethodNotAllowedAsync).WithOrder(1).WithDisplayName("PersistentServices: domain flush (other methods)");
        endpoints.Map(ServiceDomain.RecoveredPath, MethodNotAllowedAsync).WithOrder(1).WithDisplayName("PersistentServices: domain recovered state numbers (other methods)");
    }

    private static Task MethodNotAllowedAsync(HttpContext context)
    {
        var flush = context.Request.Path.Equals(ServiceDomain.FlushPath, StringComparison.OrdinalIgnoreCase);
        context.Response.Headers.Allow = flush ? "POST" : "GET, POST";
        return ProtocolProblems.WriteAsync(context, 405, "method-not-allowed", "Method not allowed",
            $"POST {ServiceDomain.FlushPath} asks for a distributed flush; POST {ServiceDomain.RecoveredPath} tells recovered state numbers and GET asks for them. " +
            "Only members of the service domain send them.");
    }

    private static async Task FlushAsync(HttpContext context)
    {
        if (await VerifyAsync(context) is not { } verified)
        {
            return;
        }

        var (runtime, member, body) = verified;
        var text = Encoding.UTF8.GetString(body);
        var dot = text.IndexOf('.', StringComparison.Ordinal);

        // Digits only (NumberStyles.None): no sign, no spaces, no exponent; a number beyond long fails to parse.
        if (dot <= 0 || !long.TryParse(text.AsSpan(0, dot), NumberStyles.None, CultureInfo.InvariantCulture, out var epoch) ||
            !long.TryParse(text.AsSpan(dot + 1), NumberStyles.None, CultureInfo.InvariantCulture, out var lsn) || epoch < 1)
        {
            await RefuseAsync(context, member, "a malformed flush request (not 'epoch.lsn')", 400, "domain-flush", "Malformed flush request",
                "The body must be 'epoch.lsn' of a state of this service: two non-negative integers, the epoch at least 1.").ConfigureAwait(false);
            return;
        }

        if (!runtime.Availability.CanServe(RequestKind.DomainMessage))
        {
            await ProtocolProblems.UnavailableAsync(context).ConfigureAwait(false);
            return;
        }

        // A state this service never had: a later epoch, or an LSN of the running epoch at or past the log's tail (every
        // state of it that a member can depend on was appended before the message that carried it left this service).
        // An answer of 200 would tell the member that state is durable. (A past epoch's LSN past what it recovered to is
        // a loss: 409 below.)
        var tail = runtime.Log.TailAddress;
        if (epoch > runtime.Epoch || (epoch == runtime.Epoch && lsn >= tail))
        {
            await RefuseAsync(context, member, $"a flush of a state this service never had ({epoch}.{lsn}; running epoch {runtime.Epoch}, tail {tail})",
                400, "domain-flush", "Flush of a state this service never had",
                epoch > runtime.Epoch
                    ? $"Epoch {epoch} is later than this service's running epoch {runtime.Epoch}."
                    : $"LSN {lsn} of the running epoch {epoch} is at or past the log's tail ({tail}): no record of this service is there yet.").ConfigureAwait(false);
            return;
        }

        runtime.CrashPoints.Hit(Checkpoints.CrashPoints.DomainFlushReceived);
        long? lost;
        try
        {
            lost = await runtime.Domain.FlushLocalAsync(epoch, lsn, context.RequestAborted).ConfigureAwait(false);
        }
        catch (DomainUnavailableException unknown)
        {
            await Http.ProtocolProblems.WriteAsync(context, 503, "domain-state-unknown", "State not known durable", unknown.Message).ConfigureAwait(false);
            return;
        }

        if (lost is { } recovered)
        {
            context.Response.StatusCode = StatusCodes.Status409Conflict;
            await context.Response.WriteAsync(recovered.ToString(CultureInfo.InvariantCulture), context.RequestAborted).ConfigureAwait(false);
            return;
        }

        context.Response.StatusCode = StatusCodes.Status200OK;
    }

    private static async Task TellAsync(HttpContext context)
    {
        if (await VerifyAsync(context) is not { } verified)
        {
            return;
        }

        var (runtime, member, body) = verified;
        if (ServiceDomain.RecoveredWire.Parse(body, static _ => true, out var error) is not { } numbers)
        {
            await RefuseAsync(context, member, error!, 400, "domain-recovered", "Malformed recovered state numbers",
                $"The body must be a JSON array of {{\"Service\": name, \"Epoch\": epoch (at least 1), \"Lsn\": LSN (not negative)}}, every field present and spelled so; it had {error}.").ConfigureAwait(false);
            return;
        }

        // A member tells only numbers of members (its own configuration lists the same domain): a name outside this service's
        // list is a member configured with another domain, and nothing of its message is learned.
        var strangers = numbers.Select(n => n.Service).Where(s => !runtime.Domain.IsMember(s)).Distinct(StringComparer.Ordinal).Take(5)
            .Select(s => s.Length > DvHeader.MaxServiceNameLength ? s[..DvHeader.MaxServiceNameLength] + "…" : s).ToList();
        if (strangers.Count > 0)
        {
            var names = string.Join(", ", strangers.Select(s => $"'{s}'"));
            await RefuseAsync(context, member, $"recovered state numbers of {names}, not members of this domain", 400, "domain-recovered",
                "Recovered state numbers of a service outside the domain",
                $"The message names {names}, which {(strangers.Count == 1 ? "is not a member" : "are not members")} of this service's domain " +
                $"({string.Join(", ", runtime.Domain.Members.Keys.Order(StringComparer.Ordinal))}): members must be configured with the same " +
                "PersistentServicesOptions.Domain.Members. Nothing of the message was learned.").ConfigureAwait(false);
            return;
        }

        if (!runtime.Availability.CanServe(RequestKind.DomainMessage))
        {
            await ProtocolProblems.UnavailableAsync(context).ConfigureAwait(false);
            return;
        }

        await runtime.Domain.LearnAsync(numbers, context.RequestAborted).ConfigureAwait(false);
        context.Response.StatusCode = StatusCodes.Status204NoContent;
    }

    private static async Task AskAsync(HttpContext context)
    {
        if (await VerifyAsync(context) is not { } verified)
        {
            return;
        }

        context.Response.ContentType = "application/json";
        await context.Response.Body.WriteAsync(ServiceDomain.RecoveredWire.Serialize(verified.Runtime.Domain.Recovered.All), context.RequestAborted).ConfigureAwait(false);
    }

    /// <summary>A member's message this service will not act on: logged (event 1109) and answered with problem details.</summary>
    private static Task RefuseAsync(HttpContext context, string member, string reason, int status, string type, string title, string detail)
    {
        AspNetCoreEvents.DomainMessageRefused(Logger(context), context.Request.Path.Value ?? "", $"{reason} (member '{member}'; answered {status})");
        return ProtocolProblems.WriteAsync(context, status, type, title, detail);
    }

    private static ILogger Logger(HttpContext context)
        => context.RequestServices.GetRequiredService<ILoggerFactory>().CreateLogger("PersistentServices.Domain");

    private static async Task<(PersistentRuntime Runtime, string Member, byte[] Body)?> VerifyAsync(HttpContext context)
    {
        var runtime = context.RequestServices.GetRequiredService<PersistentRuntime>();
        var body = await ReadAsync(context).ConfigureAwait(false);
        if (body is null)
        {
            await ProtocolProblems.WriteAsync(context, 413, "body-too-large", "Domain message too large", $"A domain message has at most {MaxBody} bytes.").ConfigureAwait(false);
            return null;
        }

        string? error = "this service is in no domain";
        if (!runtime.Domain.Enabled || runtime.Domain.VerifyMember(context, body, out error) is not { } member)
        {
            var reason = error ?? "no signature";
            AspNetCoreEvents.DomainMessageRefused(Logger(context), context.Request.Path.Value ?? "", reason);
            await ProtocolProblems.WriteAsync(context, 401, "domain-member", "Not a member of this service domain",
                $"Domain messages are accepted only from the domain's members, signed with its peer key: this one had {reason}.").ConfigureAwait(false);
            return null;
        }

        return (runtime, member, body);
    }

    private static async Task<byte[]?> ReadAsync(HttpContext context)
    {
        if (context.Request.ContentLength > MaxBody)
        {
            return null;
        }

        using var buffer = new MemoryStream();
        var chunk = new byte[8192];
        int read;
        while ((read = await context.Request.Body.ReadAsync(chunk, context.RequestAborted).ConfigureAwait(false)) > 0)
        {
            buffer.Write(chunk, 0, read);
            if (buffer.Length > MaxBody)
            {
                return null;
            }
        }

        return buffer.ToArray();
    }
}
