using System.Net.Sockets;
using PersistentServices.Calls;

namespace PersistentServices.AspNetCore.Tests.Calls;

/// <summary>
/// What a persistent call asks again: a callee out of reach, however SocketsHttpHandler reports it. A bare
/// SocketException escaped it unwrapped in a bookstore run (a store closing its socket during connection set-up while it
/// drained for an upgrade) and became the caller's 500.
/// </summary>
public sealed class PersistentCallRetriesTests
{
    public static TheoryData<Exception> OutOfReach => new()
    {
        new HttpRequestException("Connection refused"),
        new SocketException((int)SocketError.NotConnected),
        new IOException("Unable to read data from the transport connection"),
        new Polly.Timeout.TimeoutRejectedException(),
    };

    [Theory]
    [MemberData(nameof(OutOfReach))]
    public void ACalleeOutOfReach_IsAskedAgain(Exception exception) => Assert.True(PersistentCallRetries.IsTransient(exception));

    [Fact]
    public void AnApplicationsOwnError_IsNotAskedAgain() => Assert.False(PersistentCallRetries.IsTransient(new InvalidOperationException("a bug")));
}
