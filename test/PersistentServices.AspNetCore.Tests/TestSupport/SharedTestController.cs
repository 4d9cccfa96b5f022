using Microsoft.AspNetCore.Mvc;
using PersistentServices.Nondeterminism;
using PersistentServices.SharedState;

namespace PersistentServices.AspNetCore.Tests.TestSupport;

/// <summary>Shared state, generated properties and logged nondeterminism under the real runtime.</summary>
[ApiController]
[Route("shared")]
[Persistent]
public sealed partial class SharedTestController(TestBehavior behavior) : ControllerBase
{
    public static readonly SharedVariable<long> Total = new("Tests.Shared.Total");

    [Shared]
    public static partial string? LastWriter { get; set; }

    [SessionState]
    public partial int Calls { get; set; }

    [HttpPost("add")]
    public IActionResult Add(AddAmount body)
    {
        Calls++;
        var total = Total.Update(t => t + body.Amount);
        LastWriter = body.OpId;
        return Ok(new { total, calls = Calls });
    }

    /// <summary>Updates the total, then waits for <see cref="TestBehavior.Gate"/> before it answers (a crash can cut it short).</summary>
    [HttpPost("add-gated")]
    public async Task<IActionResult> AddGated(AddAmount body)
    {
        var total = Total.Update(t => t + body.Amount);
        Response.OnCompleted(() =>
        {
            behavior.Executed("shared/add-gated:completed");
            return Task.CompletedTask;
        });
        await behavior.Gate.Task;
        return Ok(new { total });
    }

    [HttpPost("stamp")]
    public IActionResult Stamp([FromServices] PersistentTimeProvider time, [FromServices] IPersistentIdGenerator ids, [FromServices] IPersistentRandom random)
        => Ok(new { id = ids.NewGuid(), at = time.GetUtcNow(), dice = random.Next(1, 7), total = Total.Read() });

    [HttpGet]
    [PersistentReadOnly]
    public IActionResult Get() => Ok(new { total = Total.Read(), lastWriter = LastWriter, calls = Calls });

    [HttpPost("readonly-write")]
    [PersistentReadOnly]
    public IActionResult ReadOnlyWrite()
    {
        Total.Write(-1);
        return Ok();
    }
}
