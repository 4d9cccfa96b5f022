using System;
using System.Collections.Generic;
using System.Threading;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.Operations;

namespace PersistentServices.Generators.Replay;

/// <summary>PS0201: a nondeterministic API (clock, random, new GUID, stopwatch) used in persistent code.</summary>
internal static partial class ReplayHazards
{
    /// <summary>The API's display name when <paramref name="operation"/> uses a nondeterministic API; otherwise null.</summary>
    private static string? DescribeNondeterministic(IOperation? operation)
    {
        switch (operation)
        {
            case IPropertyReferenceOperation reference:
                return IsNondeterministicMember(reference.Property) ? reference.Property.ContainingType.Name + "." + reference.Property.Name : null;
            case IFieldReferenceOperation reference:
                return IsNondeterministicMember(reference.Field) ? reference.Field.ContainingType.Name + "." + reference.Field.Name : null;
            case IInvocationOperation invocation:
                return IsNondeterministicMember(invocation.TargetMethod) || IsUnloggedClockReading(invocation)
                    ? invocation.TargetMethod.ContainingType.Name + "." + invocation.TargetMethod.Name + "()"
                    : null;
            case IMethodReferenceOperation reference:
                return IsNondeterministicMember(reference.Method) ? reference.Method.ContainingType.Name + "." + reference.Method.Name + "()" : null;
            case IObjectCreationOperation creation when creation.Type is { } type && IsAlwaysNondeterministicType(type):
                return "new " + type.Name + "()";
            default:
                return null;
        }
    }

    private static bool IsNondeterministicMember(ISymbol member)
    {
        var type = member.ContainingType;
        if (type is null)
        {
            return false;
        }

        if (IsAlwaysNondeterministicType(type))
        {
            return true;
        }

        var name = member.Name;
        if (KnownSymbols.Is(type, "System", "DateTime"))
        {
            return member.IsStatic && name is "Now" or "UtcNow" or "Today";
        }

        if (KnownSymbols.Is(type, "System", "DateTimeOffset"))
        {
            return member.IsStatic && name is "Now" or "UtcNow";
        }

        if (KnownSymbols.Is(type, "System", "Guid"))
        {
            return member.IsStatic && name is "NewGuid" or "CreateVersion7";
        }

        if (KnownSymbols.Is(type, "System", "Environment"))
        {
            return name is "TickCount" or "TickCount64";
        }

        if (KnownSymbols.Is(type, "System", "TimeProvider"))
        {
            return member.IsStatic && name is "System";
        }

        return false;
    }

    /// <summary>
    /// A clock reading on a receiver typed <c>System.TimeProvider</c> itself: the TimeProvider the container holds is
    /// <c>TimeProvider.System</c> unless the application registered another, and nothing logs it. Readings through
    /// <c>PersistentTimeProvider</c> (or any type derived from TimeProvider) are not reported; a reading on
    /// <c>TimeProvider.System</c> directly is reported once, at <c>TimeProvider.System</c>.
    /// </summary>
    private static bool IsUnloggedClockReading(IInvocationOperation invocation)
        => invocation.TargetMethod is { IsStatic: false, Name: "GetUtcNow" or "GetLocalNow" or "GetTimestamp" } method
           && KnownSymbols.Is(method.ContainingType, "System", "TimeProvider")
           && invocation.Instance is { Type: { } receiver } instance
           && KnownSymbols.Is(receiver, "System", "TimeProvider")
           && instance is not IPropertyReferenceOperation { Property: { IsStatic: true, Name: "System" } };

    /// <summary>Types every use of which is nondeterministic: Random, RandomNumberGenerator, Stopwatch (and derived types).</summary>
    private static bool IsAlwaysNondeterministicType(ITypeSymbol type)
        => KnownSymbols.IsOrDerivesFrom(type, "System", "Random")
           || KnownSymbols.IsOrDerivesFrom(type, "System.Security.Cryptography", "RandomNumberGenerator")
           || KnownSymbols.IsOrDerivesFrom(type, "System.Diagnostics", "Stopwatch");

    /// <summary>The receiver of a member use (a chain of uses of one value is reported once, at its source).</summary>
    private static IOperation? GetReceiverOf(IOperation operation) => operation switch
    {
        IPropertyReferenceOperation reference => Operations.SkipConversions(reference.Instance),
        IFieldReferenceOperation reference => Operations.SkipConversions(reference.Instance),
        IInvocationOperation invocation => Operations.GetReceiver(invocation),
        IMethodReferenceOperation reference => Operations.SkipConversions(reference.Instance),
        _ => null,
    };
}
