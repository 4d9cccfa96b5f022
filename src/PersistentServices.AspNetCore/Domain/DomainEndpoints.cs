using System.Globalization;
using System.Text;
using System.Text.Json;
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
/// was lost), and recovered state numbers (<c>POST</c> to tell, <c>GET</c> to ask, <c>/ps/domain/recovered</c>).
/// </summary>
internal static class DomainEndpoints
{
    private const int MaxBody = 64 * 1024;

    public static void Map(IEndpointRouteBuilder endpoints)
    {
        endpoints.MapPost(ServiceDomain.FlushPath, FlushAsync).WithDisplayName("PersistentServices: domain flush");
        endpoints.MapPost(ServiceDomain.RecoveredPath, TellAsync).WithDisplayName("PersistentServices: domain recovered state numbers (tell)");
        endpoints.MapGet(ServiceDomain.RecoveredPath, AskAsync).WithDisplayName("PersistentServices: domain recovered state numbers (ask)");
    }

    private static async Task FlushAsync(HttpContext context)
    {
        if (await VerifyAsync(context) is not { } verified)
        {
            return;
        }

        var (runtime, _, body) = verified;
        var text = Encoding.UTF8.GetString(body);
        var dot = text.IndexOf('.', StringComparison.Ordinal);
        if (dot <= 0 || !long.TryParse(text.AsSpan(0, dot), NumberStyles.None, CultureInfo.InvariantCulture, out var epoch) ||
            !long.TryParse(text.AsSpan(dot + 1), NumberStyles.None, CultureInfo.InvariantCulture, out var lsn) || epoch > runtime.Epoch)
        {
            await ProtocolProblems.WriteAsync(context, 400, "domain-flush", "Malformed flush request", "The body must be 'epoch.lsn' of a state of this service.").ConfigureAwait(false);
            return;
        }

        if (!runtime.IsAvailable)
        {
            await ProtocolProblems.UnavailableAsync(context).ConfigureAwait(false);
            return;
        }

        Checkpoints.CrashPoints.Hit(Checkpoints.CrashPoints.DomainFlushReceived);
        var lost = await runtime.Domain.FlushLocalAsync(epoch, lsn, context.RequestAborted).ConfigureAwait(false);
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

        var (runtime, _, body) = verified;
        RecoveredStateNumber[] numbers;
        try
        {
            numbers = [.. (JsonSerializer.Deserialize<Wire[]>(body) ?? [])
                .Where(w => runtime.Domain.IsMember(w.Service))
                .Select(w => new RecoveredStateNumber(w.Service, new StateId(w.Epoch, w.Lsn)))];
        }
        catch (JsonException)
        {
            await ProtocolProblems.WriteAsync(context, 400, "domain-recovered", "Malformed recovered state numbers", "The body must be a JSON array of {service, epoch, lsn}.").ConfigureAwait(false);
            return;
        }

        if (!runtime.IsAvailable)
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
        await context.Response.Body.WriteAsync(JsonSerializer.SerializeToUtf8Bytes(
            verified.Runtime.Domain.Recovered.All.Select(n => new Wire(n.Service, n.State.Epoch, n.State.Lsn)).ToArray()), context.RequestAborted).ConfigureAwait(false);
    }

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
            AspNetCoreEvents.DomainMessageRefused(context.RequestServices.GetRequiredService<ILoggerFactory>().CreateLogger("PersistentServices.Domain"),
                context.Request.Path.Value ?? "", reason);
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

    private sealed record Wire(string Service, long Epoch, long Lsn);
}
