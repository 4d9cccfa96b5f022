using System.Collections.Concurrent;
using System.Security.Claims;
using System.Text.Encodings.Web;
using Microsoft.AspNetCore.Authentication;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Http;
using Microsoft.AspNetCore.Mvc;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Logging;
using Microsoft.Extensions.Options;
using PersistentServices.Sessions;

namespace PersistentServices.AspNetCore.Tests.TestSupport;

/// <summary>
/// Switches and counters the test endpoints use. One per test: <see cref="TestServer"/> registers it as a singleton in the
/// container of every app the test starts (a restart over the same log gets the same one), and the endpoints take it
/// from there, so tests that run in parallel never see each other's counters, salt or gate.
/// </summary>
public sealed class TestBehavior
{
    private volatile string _salt = "";
    private volatile TaskCompletionSource _gate = new(TaskCreationOptions.RunContinuationsAsynchronously);

    public ConcurrentDictionary<string, int> Executions { get; } = new();

    public string Salt
    {
        get => _salt;
        set => _salt = value;
    }

    public TaskCompletionSource Gate => _gate;

    public void Reset()
    {
        Executions.Clear();
        _salt = "";
        _gate = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
    }

    public int Count(string key) => Executions.TryGetValue(key, out var n) ? n : 0;

    [System.Diagnostics.CodeAnalysis.SuppressMessage("PersistentServices", "PS0102", Justification = "The tests' independent execution counter: deliberately outside the log, so that a second execution is visible.")]
    public void Executed(string key) => Executions.AddOrUpdate(key, 1, (_, n) => n + 1);
}

/// <summary>Session state written the way the generator writes it (the runtime contract), so these tests do not need the generator.</summary>
internal static class CartState
{
    private static readonly SessionStateKey<List<string>?> ItemsKey = new("Tests.CartState.Items");
    private static readonly SessionStateKey<long> TotalKey = new("Tests.CartState.Total");

    public static List<string>? Items
    {
        get => SessionStateAccess.Get(ItemsKey);
        set => SessionStateAccess.Set(ItemsKey, value);
    }

    public static long Total
    {
        get => SessionStateAccess.Get(TotalKey);
        set => SessionStateAccess.Set(TotalKey, value);
    }
}

public sealed record AddItem(string Item);

public sealed record AddAmount(string OpId, long Amount);

public sealed record PageRequest(string OpId, int Size)
{
    /// <summary>The page's bytes: a function of the op id, the session's count and the size only.</summary>
    public static byte[] Content(string opId, long count, int size)
    {
        var bytes = new byte[size];
        // xorshift64 from a hash of the inputs: the same bytes in every process.
        var state = BitConverter.ToUInt64(System.Security.Cryptography.SHA256.HashData(System.Text.Encoding.UTF8.GetBytes(opId + "/" + count))) | 1;
        for (var i = 0; i < size; i++)
        {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            bytes[i] = (byte)state;
        }

        return bytes;
    }
}

[ApiController]
[Route("cart")]
[Persistent]
public sealed class CartController(TestBehavior behavior) : ControllerBase
{
    [HttpPost("add")]
    public IActionResult Add(AddItem body)
    {
        behavior.Executed("cart/add:" + body.Item);
        var items = CartState.Items ??= [];
        items.Add(body.Item + behavior.Salt);
        return Ok(new { items, count = items.Count });
    }

    [HttpGet]
    [PersistentReadOnly]
    public IActionResult Get() => Ok(new { items = CartState.Items ?? [] });

    [HttpPost("try-write")]
    [PersistentReadOnly]
    public IActionResult TryWrite()
    {
        CartState.Items = ["not allowed"];
        return Ok();
    }

    [HttpPost("slow")]
    public async Task<IActionResult> Slow()
    {
        behavior.Executed("cart/slow");
        await behavior.Gate.Task;
        var items = CartState.Items ??= [];
        items.Add("slow");
        return Ok(new { items });
    }

    [HttpPost("throw")]
    public IActionResult Throw()
    {
        behavior.Executed("cart/throw");
        throw new InvalidOperationException("endpoint bug");
    }

    [HttpPost("whoami")]
    public IActionResult WhoAmI()
    {
        var items = CartState.Items ??= [];
        items.Add(User.Identity?.Name ?? "anonymous");
        return Ok(new { user = User.Identity?.Name, items });
    }
}

/// <summary>Authenticates "X-Test-User: name" as that user (tests of session ownership and principal replay).</summary>
internal sealed class TestAuthHandler(IOptionsMonitor<AuthenticationSchemeOptions> options, ILoggerFactory logger, UrlEncoder encoder)
    : AuthenticationHandler<AuthenticationSchemeOptions>(options, logger, encoder)
{
    protected override Task<AuthenticateResult> HandleAuthenticateAsync()
    {
        // "X-Test-Client: id": an API-key handler's principal, with only a client_id claim (no name identifier, no name).
        if (Request.Headers["X-Test-Client"] is [{ } client])
        {
            var apiKey = new ClaimsIdentity([new Claim("client_id", client)], "ApiKey");
            return Task.FromResult(AuthenticateResult.Success(new AuthenticationTicket(new ClaimsPrincipal(apiKey), "Test")));
        }

        if (Request.Headers["X-Test-User"] is not [{ } user])
        {
            return Task.FromResult(AuthenticateResult.NoResult());
        }

        var identity = new ClaimsIdentity([new Claim(ClaimTypes.NameIdentifier, user), new Claim(ClaimTypes.Name, user)], "Test");
        return Task.FromResult(AuthenticateResult.Success(new AuthenticationTicket(new ClaimsPrincipal(identity), "Test")));
    }
}

internal static class TestApp
{
    public static void Configure(WebApplication app, Action<IEndpointConventionBuilder>? sessionEndpoints = null, Action<WebApplication>? beforePersistentServices = null)
    {
        app.UseAuthentication();
        beforePersistentServices?.Invoke(app);
        app.UsePersistentServices(sessionEndpoints);
        app.MapControllers();
        app.MapPost("/counter/add", [Persistent] (AddAmount body, [FromServices] TestBehavior behavior) =>
        {
            behavior.Executed("counter:" + body.OpId);
            CartState.Total += body.Amount;
            return Results.Ok(new { total = CartState.Total });
        });
        app.MapPost("/counter/add-keyed", [Persistent, RequireIdempotencyKey] (AddAmount body, [FromServices] TestBehavior behavior) =>
        {
            behavior.Executed("counter:" + body.OpId);
            CartState.Total += body.Amount;
            return Results.Ok(new { total = CartState.Total });
        });
        app.MapGet("/counter", () => Results.Ok(new { total = CartState.Total })).WithMetadata(new PersistentReadOnlyAttribute());
        app.MapGet("/plain", () => Results.Ok(new { plain = true }));

        // The same roles by endpoint convention instead of attributes (PersistentEndpointConventionBuilderExtensions).
        app.MapPost("/convention/add", (AddAmount body, [FromServices] TestBehavior behavior) =>
        {
            behavior.Executed("convention:" + body.OpId);
            CartState.Total += body.Amount;
            return Results.Ok(new { total = CartState.Total });
        }).Persistent();
        app.MapGet("/convention", () => Results.Ok(new { total = CartState.Total })).PersistentReadOnly();
        var group = app.MapGroup("/convention-group").Persistent();
        group.MapPost("/add", (AddAmount body, [FromServices] TestBehavior behavior) =>
        {
            behavior.Executed("convention-group:" + body.OpId);
            CartState.Total += body.Amount;
            return Results.Ok(new { total = CartState.Total });
        });

        // A reply of any size (a catalog page): deterministic bytes from the op id and the session's count, so replay
        // reproduces them; a header that a retry must get back too.
        app.MapPost("/page", [Persistent] (PageRequest body, HttpContext context, [FromServices] TestBehavior behavior) =>
        {
            behavior.Executed("page:" + body.OpId);
            CartState.Total += 1;
            context.Response.Headers["X-Page"] = body.OpId + "/" + CartState.Total;
            return Results.Bytes(PageRequest.Content(body.OpId, CartState.Total, body.Size), "application/octet-stream");
        });
        app.MapHealthChecks("/health/ready");
    }

    public static void AddServices(IServiceCollection services, TestBehavior behavior)
    {
        services.AddSingleton(behavior);
        services.AddControllers().AddApplicationPart(typeof(CartController).Assembly);
        services.AddAuthentication("Test").AddScheme<AuthenticationSchemeOptions, TestAuthHandler>("Test", _ => { });
    }
}
